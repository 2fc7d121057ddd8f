// Drives Forge's AI SDK routes with the real `ai` package's client code (no React):
// DefaultChatTransport sends a message and reads the UI message stream, and
// readUIMessageStream folds it into UIMessages; the last one is printed as JSON.
// Usage: node chat.mjs <ai5|ai6|ai7> <server url> <token> <chat id> <text> [resume]
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
const errors = [];
let last = null;
for await (const message of ai.readUIMessageStream({
  stream,
  onError: (error) => errors.push(String(error)),
})) {
  last = message;
}
console.log(JSON.stringify({ message: last, errors }));
