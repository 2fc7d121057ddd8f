// Drives Forge's regenerate with the real `ai` package's chat (AbstractChat, no React):
// a chat restored from GET /api/chat/{id}/messages sends a message, then
// chat.regenerate() asks for the last reply again. Prints the chat's messages
// after each step as JSON: {sent, regenerated, errors}.
// Usage: node regenerate.mjs <ai5|ai6|ai7> <server url> <token> <chat id> <text>
const [version, url, token, chatId, text] = process.argv.slice(2);
const ai = await import(version);
const headers = { Authorization: `Token ${token}` };

class State {
  constructor(messages) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends ai.AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new State(messages) });
  }
}

const restored = await fetch(`${url}/api/chat/${chatId}/messages`, { headers });
const history = restored.status === 200 ? (await restored.json()).results : [];
const errors = [];
const chat = new Chat({
  id: chatId,
  messages: history,
  transport: new ai.DefaultChatTransport({ api: `${url}/api/chat`, headers }),
  onError: (error) => errors.push(String(error)),
});
await chat.sendMessage({ text });
const sent = structuredClone(chat.messages);
await chat.regenerate();
const regenerated = structuredClone(chat.messages);
if (chat.status !== 'ready') errors.push(`status ${chat.status}`);
console.log(JSON.stringify({ sent, regenerated, errors }));
