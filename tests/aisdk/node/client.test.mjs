// The real `ai` package's client code (no React) against a live Forge, under Node's own
// test runner. tests/aisdk/test_node_client.py starts daphne (the model each scenario
// needs), installs the pinned `ai` versions and runs one scenario per invocation:
//
//   AI=ai5|ai6|ai7 FORGE_URL=… FORGE_TOKEN=… CHAT_ID=… PROMPT=… \
//     node --test --test-name-pattern='^reply' client.test.mjs
//
// Every test compares what the client folded from the UI message stream with what Forge
// stored, read back as UIMessages from GET /api/chat/{id}/messages: one message, the
// stored id, the stored parts, no duplicate.
import assert from 'node:assert/strict';
import { test } from 'node:test';

const { AI, FORGE_URL: url, FORGE_TOKEN: token, CHAT_ID: chatId, PROMPT: prompt } = process.env;
const ai = await import(AI);
const headers = { Authorization: `Token ${token}` };
const transport = () => new ai.DefaultChatTransport({ api: `${url}/api/chat`, headers });
const userMessage = (text) => ({ id: 'u1', role: 'user', parts: [{ type: 'text', text }] });

/** The parts without the client's bookkeeping fields (providerMetadata, state of text). */
function comparable(message) {
  const parts = message.parts.map((part) => {
    if (part.type === 'text' || part.type === 'reasoning') return { type: part.type, text: part.text };
    if (part.type.startsWith('tool-')) {
      const tool = { type: part.type, toolCallId: part.toolCallId, input: part.input, state: part.state };
      for (const key of ['output', 'errorText']) if (part[key] !== undefined) tool[key] = part[key];
      return tool;
    }
    if (part.type.startsWith('data-')) return { type: part.type, id: part.id, data: part.data };
    if (part.type === 'file') return { type: 'file', mediaType: part.mediaType, url: part.url };
    return { type: part.type };
  });
  return { id: message.id, role: message.role, parts };
}

async function stored() {
  const answer = await fetch(`${url}/api/chat/${chatId}/messages`, { headers });
  assert.equal(answer.status, 200);
  return (await answer.json()).results;
}

/** Fold a UI message stream the way useChat does; returns the last message and chunk types. */
async function fold(stream, onMessage = async () => {}) {
  const [folded, raw] = stream.tee();
  const types = [];
  const reading = (async () => {
    for await (const chunk of raw) types.push(chunk.type);
  })();
  const errors = [];
  let last = null;
  for await (const message of ai.readUIMessageStream({
    stream: folded,
    onError: (error) => errors.push(String(error)),
  })) {
    last = message;
    await onMessage(message);
  }
  await reading;
  assert.deepEqual(errors, []);
  return { message: last, types };
}

const send = (text) =>
  transport().sendMessages({
    chatId,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
    messages: [userMessage(text)],
  });

test('reply: text, reasoning and a tool call end as the stored message', async () => {
  const { message, types } = await fold(await send(prompt));
  const history = await stored();
  assert.deepEqual(comparable(message), comparable(history.at(-1)));
  const kinds = new Set(message.parts.map((p) => p.type));
  for (const kind of ['reasoning', 'text', 'tool-list_files']) assert.ok(kinds.has(kind), kind);
  assert.equal(types.at(-1), 'finish');
});

test('resume: a reconnect mid-reply ends with the same message and no duplicate', async () => {
  assert.equal(await transport().reconnectToStream({ chatId }), null, 'nothing runs yet: 204');
  // A client that leaves after the first text: the reply goes on without it.
  const reader = (await send(prompt)).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    assert.ok(!done, 'the reply ended before any text');
    if (value.type === 'text-delta') break;
  }
  await reader.cancel();
  await new Promise((resolve) => setTimeout(resolve, 300));
  const resumed = await transport().reconnectToStream({ chatId });
  assert.notEqual(resumed, null, 'a reply runs: the resume is a stream');
  const { message, types } = await fold(resumed);
  assert.equal(types[0], 'start', 'the resume replays the message from its start');
  const history = await stored();
  assert.equal(history.length, 2, 'one prompt, one reply');
  assert.deepEqual(comparable(message), comparable(history.at(-1)));
  const texts = message.parts.filter((p) => p.type === 'text');
  assert.equal(texts.length, 1);
  assert.equal(texts[0].text, process.env.EXPECTED_TEXT);
  assert.equal(types.at(-1), 'finish');
});

test('stop: the stop route ends the reply as aborted', async () => {
  let stopped = false;
  const { message, types } = await fold(await send(prompt), async (current) => {
    const streamed = current.parts.some((p) => p.type === 'text' && p.text.length > 0);
    if (!stopped && streamed) {
      stopped = true;
      const answer = await fetch(`${url}/api/chat/${chatId}/stop`, { method: 'POST', headers });
      assert.equal(answer.status, 204);
    }
  });
  assert.ok(stopped, 'some text streamed before the stop');
  assert.equal(types.at(-1), 'abort');
  const history = await stored();
  assert.deepEqual(comparable(message), comparable(history.at(-1)));
  const answer = await fetch(`${url}/api/chat/${chatId}/stop`, { method: 'POST', headers });
  assert.equal(answer.status, 409, 'nothing runs any more');
});

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

test('regenerate: AbstractChat.regenerate replaces the last reply with a new stored one', async () => {
  class Chat extends ai.AbstractChat {
    constructor({ messages, ...init }) {
      super({ ...init, state: new State(messages) });
    }
  }
  const missing = await fetch(`${url}/api/chat/${chatId}/messages`, { headers });
  assert.equal(missing.status, 404);
  const errors = [];
  const chat = new Chat({
    id: chatId,
    messages: [], // a new chat: GET …/messages is a 404 until the first message
    transport: transport(),
    onError: (error) => errors.push(String(error)),
  });
  await chat.sendMessage({ text: prompt });
  const sent = structuredClone(chat.messages);
  assert.deepEqual(sent.map((m) => m.role), ['user', 'assistant']);
  const first = await stored();
  assert.equal(sent[1].id, first.at(-1).id, 'the reply carries the stored id');

  await chat.regenerate();
  assert.deepEqual(errors, []);
  assert.equal(chat.status, 'ready');
  const regenerated = chat.messages;
  assert.deepEqual(regenerated.map((m) => m.role), ['user', 'assistant']);
  assert.deepEqual(regenerated[0], sent[0]);
  assert.notEqual(regenerated[1].id, sent[1].id, 'a new assistant message');
  // The restored chat shows only the new reply; the superseded one is gone from it.
  const after = await stored();
  assert.deepEqual(after.map((m) => m.role), ['user', 'assistant']);
  assert.deepEqual(comparable(regenerated[1]), comparable(after.at(-1)));
  assert.ok(regenerated[1].parts.some((p) => p.type === 'text' && p.text === prompt));
});

// --- tool approvals (ai 6 and 7; ai 5 has none) ---------------------------------------

const approvalHeaders = { ...headers, 'X-Forge-Approvals': '1' };
const approvalTransport = () =>
  new ai.DefaultChatTransport({ api: `${url}/api/chat`, headers: approvalHeaders });
const toolOf = (message) => message.parts.find((p) => p.type.startsWith('tool-'));

async function storedWithApprovals() {
  const answer = await fetch(`${url}/api/chat/${chatId}/messages`, { headers: approvalHeaders });
  assert.equal(answer.status, 200);
  return (await answer.json()).results;
}

async function until(predicate, what, seconds = 60) {
  const deadline = Date.now() + seconds * 1000;
  while (!predicate()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test('approval: addToolApprovalResponse answers the request and the same reply goes on', async () => {
  class Chat extends ai.AbstractChat {
    constructor({ messages, ...init }) {
      super({ ...init, state: new State(messages) });
    }
  }
  const approve = process.env.APPROVE === '1';
  const errors = [];
  const chat = new Chat({
    id: chatId,
    messages: [],
    transport: approvalTransport(),
    sendAutomaticallyWhen: ai.lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: (error) => errors.push(String(error)),
  });
  await chat.sendMessage({ text: prompt });
  assert.deepEqual(errors, []);
  assert.equal(chat.status, 'ready', 'the suspended turn ended its stream');
  const asked = chat.messages.at(-1);
  const tool = toolOf(asked);
  assert.equal(tool.state, 'approval-requested');
  assert.equal(tool.approval.id, tool.toolCallId, 'the approval id is the call id');
  const waiting = await storedWithApprovals();
  assert.equal(waiting.at(-1).id, asked.id);
  assert.deepEqual(comparable(asked), comparable(waiting.at(-1)), 'history shows the request');

  await chat.addToolApprovalResponse({ id: tool.approval.id, approved: approve, reason: process.env.REASON });
  const settled = approve ? 'output-available' : 'output-denied';
  await until(
    () => chat.status === 'ready' && toolOf(chat.messages.at(-1)).state === settled,
    `the tool to be ${settled}`,
  );
  await until(() => chat.status === 'ready', 'the continuation to end');
  assert.deepEqual(errors, []);
  assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], 'the same reply went on');
  const reply = chat.messages.at(-1);
  assert.equal(reply.id, asked.id);
  const text = reply.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
  assert.match(text, /^The tool returned/);
  if (!approve) assert.ok(text.includes(process.env.REASON), 'the model was told the reason');
  const history = await storedWithApprovals();
  assert.equal(history.length, 2);
  assert.deepEqual(comparable(reply), comparable(history.at(-1)));
});

test('waiting: a client without approvals sees the call waiting with its input, and no error', async () => {
  const { message, types } = await fold(await send(prompt));
  const tool = toolOf(message);
  assert.equal(tool.state, 'input-available');
  assert.deepEqual(tool.input, {});
  assert.ok(!types.includes('tool-approval-request'));
  assert.equal(types.at(-1), 'finish');
  const history = await stored();
  assert.deepEqual(comparable(message), comparable(history.at(-1)));
});
