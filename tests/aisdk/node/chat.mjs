// Drives Forge's AI SDK routes with the real `ai` package's client code (no React):
// DefaultChatTransport sends a message and reads the UI message stream, and
// readUIMessageStream folds it into UIMessages; the last one is printed as JSON.
// Usage: node chat.mjs <ai5|ai6|ai7> <server url> <token> <chat id> <text> [resume|stop]
// (stop: POST …/stop once some text has streamed; the chunk types are printed too)
const [version, url, token, chatId, text, mode] = process.argv.slice(2);
const ai = await import(version);
const transport = new ai.DefaultChatTransport({
  api: `${url}/api/chat`,
  headers: { Authorization: `Token ${token}` },
});
let stream;
if (mode === 'resume') {
  stream = await transport.reconnectToStream({ chatId });
  if (stream === null) {
    console.log(JSON.stringify({ resumed: null }));
    process.exit(0);
  }
} else {
  stream = await transport.sendMessages({
    chatId,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text }] }],
  });
}
const [folded, raw] = stream.tee();
const types = [];
const reading = (async () => {
  for await (const chunk of raw) types.push(chunk.type);
})();
const errors = [];
let last = null;
let stopped = false;
for await (const message of ai.readUIMessageStream({
  stream: folded,
  onError: (error) => errors.push(String(error)),
})) {
  last = message;
  const streamed = message.parts.some((p) => p.type === 'text' && p.text.length > 0);
  if (mode === 'stop' && !stopped && streamed) {
    stopped = true;
    const answer = await fetch(`${url}/api/chat/${chatId}/stop`, {
      method: 'POST',
      headers: { Authorization: `Token ${token}` },
    });
    if (answer.status !== 204) errors.push(`stop answered ${answer.status}`);
  }
}
await reading;
console.log(JSON.stringify({ message: last, errors, types }));
