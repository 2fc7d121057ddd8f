// A session's WebSocket that stays connected: it opens with ?after=<the last seq
// applied> (asked of the caller each time), pings while open, and when the
// connection drops it reconnects with exponential backoff (0.5 s doubling to 15 s,
// ±20 % jitter), which starts over once a socket proves itself. A refusal (no
// such session, a bad request) stops it; an expired login goes to the login page.
//
// A connection can also die without closing (a proxy or a network that silently
// stops carrying data): the socket stays OPEN and nothing arrives. So every ping
// expects an answer (the pong, or any frame) within PONG_WITHIN; none means the
// connection is dead, and it is dropped and resumed from the last seq, as a close
// would be. The browser's "online" event pings at once (reconnectNow).

const PING_EVERY = 25000;
const PONG_WITHIN = 10000;
const MAX_BACKOFF = 15000;
const STABLE_AFTER = 5000;

export class SessionSocket {
  // url(): the URL to open now. Callbacks (all optional):
  //   onFrame(frame)          every parsed frame, in arrival order
  //   onState(state, delay)   "connecting" | "reconnecting" | "open" | "waiting" | "failed"
  //   onOpen({resumed})       open (resumed: not the first connection)
  //   onClose()               a socket went away
  //   onRefused(code)         4404 or 4400: given up for good
  //   onUnauthorized()        4401
  //   schedule(fn)            run fn once what the old socket sent is applied
  constructor(url, callbacks = {}) {
    this.url = url;
    this.on = callbacks;
    this.ws = null;
    this.generation = 0; // frames and closes of older sockets are ignored
    this.closed = false; // closed by the page: no more reconnects
    this.failed = false; // refused for good: no more reconnects
    this.attempt = 0;
    this.reconnectTimer = null;
    this.reconnectQueued = false;
    this.stableTimer = null;
    this.pingTimer = null;
    this.pongTimer = null; // set while a ping awaits its answer
    this.stats = { connects: 0, reconnects: 0 };
  }

  emit(name, ...args) {
    const callback = this.on[name];
    if (callback) callback(...args);
  }

  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  send(frame) {
    if (!this.connected) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  connect() {
    if (this.closed) return;
    const generation = ++this.generation;
    const ws = new WebSocket(this.url());
    this.ws = ws;
    this.stats.connects += 1;
    this.emit("onState", this.stats.connects > 1 ? "reconnecting" : "connecting");
    ws.addEventListener("open", () => {
      if (generation !== this.generation) return;
      // The backoff starts over once this socket proves itself (a frame, or 5 s open).
      this.stableTimer = setTimeout(() => {
        this.attempt = 0;
      }, STABLE_AFTER);
      this.emit("onState", "open");
      this.startPing();
      this.emit("onOpen", { resumed: this.stats.connects > 1 });
    });
    ws.addEventListener("message", (event) => {
      if (generation !== this.generation) return;
      this.attempt = 0;
      clearTimeout(this.pongTimer); // the connection carries data: alive
      this.pongTimer = null;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      this.emit("onFrame", frame);
    });
    ws.addEventListener("close", (event) => {
      if (generation !== this.generation) return;
      this.onClose(event);
    });
  }

  onClose(event) {
    this.ws = null;
    clearTimeout(this.stableTimer);
    this.stopPing();
    this.emit("onClose");
    if (this.closed) return;
    if (event.code === 4401) {
      this.emit("onUnauthorized");
      return;
    }
    if (event.code === 4404 || event.code === 4400) {
      this.failed = true;
      this.emit("onState", "failed");
      this.emit("onRefused", event.code);
      return;
    }
    this.scheduleReconnect();
  }

  // For good: no frame, close or reconnect of this socket reaches the page again.
  close() {
    this.closed = true;
    this.generation += 1;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.stableTimer);
    this.stopPing();
    if (this.ws) this.ws.close(1000, "closed");
    this.ws = null;
  }

  scheduleReconnect() {
    clearTimeout(this.reconnectTimer);
    const base = Math.min(MAX_BACKOFF, 500 * 2 ** this.attempt);
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.attempt += 1;
    this.emit("onState", "waiting", delay);
    this.reconnectTimer = setTimeout(() => this.reconnectNow(), delay);
  }

  reconnectNow() {
    if (this.ws && !this.closed) {
      this.ping(); // open, as far as the browser knows: make it prove it
      return;
    }
    if (this.closed || this.failed || this.ws || this.reconnectQueued) return;
    clearTimeout(this.reconnectTimer);
    this.stats.reconnects += 1;
    this.reconnectQueued = true;
    // Frames of the old socket still being applied come first: resume after them.
    const reconnect = () => {
      this.reconnectQueued = false;
      this.connect();
    };
    if (this.on.schedule) this.on.schedule(reconnect);
    else reconnect();
  }

  // Drop this socket (and what it still sends) and resume from the caller's seq.
  restart() {
    this.generation += 1;
    if (this.ws) this.ws.close(1000, "resync");
    this.ws = null;
    clearTimeout(this.stableTimer);
    this.stopPing();
    this.scheduleReconnect();
  }

  startPing() {
    this.stopPing();
    this.pingTimer = setInterval(() => this.ping(), PING_EVERY);
  }

  // A ping the connection must answer (a pong, or any frame) within PONG_WITHIN.
  ping() {
    if (!this.send({ type: "ping" }) || this.pongTimer) return;
    const generation = this.generation;
    this.pongTimer = setTimeout(() => {
      this.pongTimer = null;
      if (generation === this.generation && this.ws) this.restart(); // dead: resume
    }, this.pongWithin ?? PONG_WITHIN);
  }

  stopPing() {
    clearInterval(this.pingTimer);
    this.pingTimer = null;
    clearTimeout(this.pongTimer);
    this.pongTimer = null;
  }
}
