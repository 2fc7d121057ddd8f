// The chat page's socket (static/forge/socket.js) against a fake WebSocket, without a
// browser: node --test tests/js/
//
// QA (MEDIUM): a connection that silently stopped carrying data (a proxy holding it)
// stayed "Live" for good while the reply froze: the socket pinged and never checked
// for an answer. A ping that gets none within PONG_WITHIN now drops the socket and
// resumes from the last seq, as a close does.

import assert from "node:assert/strict";
import { beforeEach, mock, test } from "node:test";

class FakeWebSocket {
  static OPEN = 1;
  static opened = [];

  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    this.listeners = {};
    this.closedWith = null;
    FakeWebSocket.opened.push(this);
  }

  addEventListener(name, listener) {
    (this.listeners[name] ??= []).push(listener);
  }

  fire(name, event = {}) {
    for (const listener of this.listeners[name] ?? []) listener(event);
  }

  open() {
    this.readyState = FakeWebSocket.OPEN;
    this.fire("open");
  }

  receive(frame) {
    this.fire("message", { data: JSON.stringify(frame) });
  }

  send(data) {
    this.sent.push(JSON.parse(data));
  }

  close(code) {
    this.closedWith = code;
    this.readyState = 3;
  }
}

globalThis.WebSocket = FakeWebSocket;
const { SessionSocket } = await import("../../static/forge/socket.js");

function pings(ws) {
  return ws.sent.filter((frame) => frame.type === "ping").length;
}

beforeEach(() => {
  FakeWebSocket.opened = [];
  mock.timers.enable({ apis: ["setTimeout", "setInterval", "Date"] });
});

test("a ping with no answer drops the socket and resumes", (t) => {
  t.after(() => mock.timers.reset());
  const states = [];
  const socket = new SessionSocket(() => "ws://x/ws/sessions/ses_1/?after=7", {
    onState: (state) => states.push(state),
  });
  socket.connect();
  const first = FakeWebSocket.opened[0];
  first.open();
  mock.timers.tick(25000); // the first ping
  assert.equal(pings(first), 1);
  mock.timers.tick(9999);
  assert.equal(first.closedWith, null); // still within its time
  mock.timers.tick(1); // no pong, no frame: the connection is dead
  assert.equal(first.closedWith, 1000);
  assert.equal(states.at(-1), "waiting");
  mock.timers.tick(1000); // the backoff (0.5 s ± 20 %)
  assert.equal(FakeWebSocket.opened.length, 2); // resumed with the caller's seq
  assert.equal(FakeWebSocket.opened[1].url, "ws://x/ws/sessions/ses_1/?after=7");
  socket.close();
});

test("a connection that answers stays, ping after ping", (t) => {
  t.after(() => mock.timers.reset());
  const socket = new SessionSocket(() => "ws://x/", {});
  socket.connect();
  const ws = FakeWebSocket.opened[0];
  ws.open();
  for (let n = 1; n <= 4; n += 1) {
    mock.timers.tick(25000);
    assert.equal(pings(ws), n); // every ping is sent (none held back by an old wait)
    mock.timers.tick(3000);
    ws.receive({ kind: "pong" });
  }
  mock.timers.tick(20000);
  assert.equal(ws.closedWith, null);
  assert.equal(FakeWebSocket.opened.length, 1);
  socket.close();
});

test("'online' on a socket the browser still thinks open makes it prove it", (t) => {
  t.after(() => mock.timers.reset());
  const socket = new SessionSocket(() => "ws://x/", {});
  socket.connect();
  const ws = FakeWebSocket.opened[0];
  ws.open();
  socket.reconnectNow(); // the page's "online" handler
  assert.equal(pings(ws), 1); // at once, not in 25 s
  mock.timers.tick(10000);
  assert.equal(ws.closedWith, 1000);
  socket.close();
});
