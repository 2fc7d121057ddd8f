// One open session: its history and live frames applied to a SessionLog, and the
// log's changes drawn into the message list.
//
// Opening loads the newest page of history over HTTP, then opens the session's
// socket with ?after=<head_seq of that page>. Frames apply one at a time, in
// arrival order: durable events by seq (a gap is filled from /events/, or the
// socket restarts), deltas by offset (a hole asks for a snapshot), snapshots,
// status, acks and errors.

import { $ } from "./dom.js";
import { MessageList } from "./messagelist.js";
import { SessionLog } from "./sessionlog.js";
import { SessionSocket } from "./socket.js";

const PAGE_SIZE = 50;
const ACK_TIMEOUT = 15000;
const SNAPSHOT_EVERY = 1000; // at most one snapshot request a second
const REOPEN = "Select it in the list to try again.";

function randomId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return "c_" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export class SessionView {
  // chat: the page (see chat.js); api: an Api; wsPath: "/ws/sessions/".
  constructor(chat, session, { api, wsPath }) {
    this.chat = chat;
    this.api = api;
    this.id = session.id;
    this.status = session.status || "idle";
    this.retry = null;
    this.log = new SessionLog();
    this.nextUrl = null;
    this.pending = new Map(); // client_id -> {text, after}, until acked
    this.uploading = false; // a prompt going over HTTP (with its files), until answered
    this.openFailed = false; // its history could not be loaded (see open)
    this.wasBusy = false; // a reply ran when the state was last shown
    this.finished = false; // and has ended since: the status line says so
    // Prompts whose socket closed before their ack: given back, and looked for in the
    // log once the socket is back ({text, after: the newest message id when sent}).
    this.unconfirmed = [];
    this.queue = Promise.resolve();
    this.lastSnapshotRequest = 0;
    this.counters = { gapsFilled: 0, snapshotRequests: 0 };
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const base = `${scheme}//${location.host}${wsPath}${encodeURIComponent(this.id)}/`;
    this.socket = new SessionSocket(() => `${base}?after=${this.log.lastSeq}`, {
      onFrame: (frame) => this.enqueue(frame),
      onState: (state, delay) => chat.setConnection(state, delay),
      onOpen: ({ resumed }) => {
        this.updateBusy();
        // Status frames are not replayed: ask what the session is doing now.
        if (resumed) this.refreshStatus();
      },
      onClose: () => this.promptsLost(),
      onUnauthorized: () => api.toLogin(),
      onRefused: (code) =>
        code === 4404 ? chat.goneElsewhere(this.id) : chat.showError("The server refused the connection."),
      schedule: (fn) => this.enqueueTask(fn),
    });
    this.list = new MessageList($("message-list"), $("messages"), this.log, {
      openSession: (id) => chat.select(id),
      answerApproval: (callId, body) => this.answerApproval(callId, body),
    });
  }

  // --- what the console (window.forgeChat) and the browser tests look at ---

  get stats() {
    return { ...this.socket.stats, ...this.counters, deltasIgnored: this.log.stats.deltasIgnored };
  }
  get lastSeq() {
    return this.log.lastSeq;
  }
  set lastSeq(seq) {
    this.log.lastSeq = seq;
  }
  get parts() {
    return this.log.parts;
  }
  get messages() {
    return this.log.messages;
  }
  get ws() {
    return this.socket.ws;
  }
  get connected() {
    return this.socket.connected;
  }
  get closed() {
    return this.socket.closed;
  }
  set closed(value) {
    this.socket.closed = value;
  }
  connect() {
    this.socket.connect();
  }
  reconnectNow() {
    this.socket.reconnectNow();
  }

  // --- lifecycle ---

  async open() {
    this.list.clear();
    this.setOlder(null);
    this.chat.setConnection("connecting");
    try {
      const [page, session] = await Promise.all([
        this.api.messages(this.id, PAGE_SIZE),
        this.api.session(this.id).catch(() => null),
      ]);
      if (this.closed) return;
      if (session) {
        this.status = session.status;
        this.chat.sessionChanged(session);
      }
      this.log.lastSeq = page.head_seq;
      this.addPage(page);
      this.list.scrollToBottom();
      this.updateBusy();
      this.socket.connect();
    } catch (error) {
      if (this.closed) return;
      if (error.status === 404) {
        this.chat.goneElsewhere(this.id); // deleted since the list was read
        return;
      }
      // Its history is not loaded and no socket will come: a click on it in the list
      // opens it again, and a prompt is not sent into it (QA: a click did nothing, the
      // view stayed empty, and a prompt went over HTTP, to show nowhere).
      this.openFailed = true;
      this.chat.setConnection("failed");
      this.chat.showError(`Could not open the session: ${error.message}. ${REOPEN}`);
    }
  }

  close() {
    this.socket.close();
  }

  async refreshStatus() {
    try {
      const session = await this.api.session(this.id);
      if (this.closed) return;
      this.status = session.status;
      this.chat.sessionChanged(session);
      this.updateBusy();
    } catch {
      // the next status frame will tell
    }
  }

  // --- frames, applied one at a time in arrival order ---

  enqueue(frame) {
    this.enqueueTask(() => this.handleFrame(frame), frame);
  }

  enqueueTask(task, frame = null) {
    this.queue = this.queue
      .then(task)
      .catch((error) => console.error("forge: a frame could not be applied", frame, error));
  }

  async handleFrame(frame) {
    if (this.closed) return;
    switch (frame.kind) {
      case "event":
        return this.handleEvent(frame);
      case "delta": {
        const result = this.log.applyDelta(frame);
        if (result.status === "hole") this.requestSnapshot(); // ask for the text so far
        return this.draw(result.changes);
      }
      case "snapshot":
        return this.draw(this.log.applySnapshot(frame).changes);
      case "status":
        this.confirmPrompts(); // a connection's backlog ends with its status frame
        return this.applyStatus(frame);
      case "ack":
        this.pending.delete(frame.client_id);
        this.startedHere = false; // its first prompt is taken: the session is the user's
        return this.updateBusy();
      case "error":
        return this.applyError(frame);
      default:
        return; // pong, and kinds this page does not know
    }
  }

  async handleEvent(event) {
    const result = this.log.offerEvent(event);
    this.apply(result.changes);
    if (result.status !== "held") return;
    try {
      await this.fillGap();
    } catch (error) {
      console.warn("forge: could not fill a gap in the log; reconnecting", error);
    }
    if (this.closed) return;
    if (this.log.gap) {
      // Still missing: start over from the last seq applied.
      this.log.dropHeld();
      this.socket.restart();
    }
  }

  // Fetch and apply the events the log is missing (what it held back follows).
  async fillGap() {
    const gap = this.log.gap;
    for await (const events of this.api.eventPages(this.id, gap.after)) {
      if (this.closed) return;
      for (const event of events) {
        if (event.seq >= gap.before) return;
        const result = this.log.offerEvent(event);
        if (result.status === "applied") this.counters.gapsFilled += 1;
        this.apply(result.changes);
      }
      if (!this.log.gap) return;
    }
  }

  requestSnapshot() {
    const now = Date.now();
    if (now - this.lastSnapshotRequest < SNAPSHOT_EVERY) return;
    if (this.socket.send({ type: "snapshot" })) {
      this.lastSnapshotRequest = now;
      this.counters.snapshotRequests += 1;
    }
  }

  applyStatus(frame) {
    const wasBusy = this.status !== "idle";
    this.status = frame.status;
    this.retry = frame.status === "retry" ? { attempt: frame.attempt, next_at: frame.next_at } : null;
    this.updateBusy();
    if (wasBusy && frame.status === "idle") this.chat.refreshSessionsSoon();
  }

  // The socket closed with prompts not yet acknowledged: a frame over the server's
  // limit closes it with 1009 before any answer, but a connection that dropped may
  // have lost only the ack, the prompt being logged and answered. The text goes back
  // into the box at once, and once the socket is back (its backlog applied) the log
  // says which it was: a prompt found there is taken back out of the box, so that
  // the user does not send it twice (QA: the page said it was not sent, and a second
  // Send ran it again).
  promptsLost() {
    if (this.pending.size > 0) {
      for (const prompt of this.pending.values()) {
        this.chat.composer.giveBack(prompt.text);
        this.unconfirmed.push(prompt);
      }
      this.pending.clear();
      this.chat.showError(
        "The connection closed before the prompt was acknowledged; it is back in the box " +
          "until the page is connected again and knows whether it arrived.",
      );
    }
    this.updateBusy();
  }

  confirmPrompts() {
    if (this.unconfirmed.length === 0) return;
    const prompts = this.unconfirmed;
    this.unconfirmed = [];
    const arrived = prompts.filter((p) => this.log.hasPromptAfter(p.after, p.text));
    for (const prompt of arrived) this.chat.composer.takeBack(prompt.text);
    this.chat.showError(
      arrived.length === prompts.length
        ? "The prompt had arrived before the connection closed; it was not sent twice."
        : "The prompt did not arrive before the connection closed; it is back in the box.",
    );
  }

  applyError(frame) {
    if (this.chat.discarded.has(this.id)) return; // being deleted here: its news is none
    const text = this.pending.get(frame.client_id)?.text;
    if (text !== undefined) {
      this.pending.delete(frame.client_id);
      this.chat.composer.giveBack(text);
    }
    const message = `${frame.message || "Something went wrong"} (${frame.code || "error"})`;
    if (text !== undefined && this.startedHere) {
      // The first message of a session made for it was refused: the session goes too.
      this.chat.discardUnused(this).then(() => this.chat.showError(message));
      return;
    }
    this.chat.showError(message);
    this.updateBusy();
  }

  // --- the log's changes ---

  // Draw the changes, then show whether a turn runs.
  apply(changes) {
    if (changes.length === 0) return;
    this.draw(changes);
    this.updateBusy();
  }

  draw(changes) {
    for (const change of changes) {
      if (change.type === "session") this.chat.sessionChanged(change.data);
      else if (change.type === "message" && change.at) this.chat.touchSession(this.id, change.at);
    }
    this.list.draw(changes);
  }

  // --- history ---

  addPage(page) {
    this.draw(this.log.addPage(page.results));
    this.setOlder(page.next);
    this.list.flush();
  }

  setOlder(next) {
    this.nextUrl = next;
    $("load-older").hidden = !next;
  }

  async loadOlder() {
    if (!this.nextUrl) return;
    const button = $("load-older");
    const focused = document.activeElement === button;
    button.disabled = true;
    try {
      const page = await this.api.next(this.nextUrl);
      if (this.closed) return;
      this.list.keepPosition(() => this.addPage(page));
      // The oldest page hides the button: the keyboard stays on the messages (QA: the
      // focus fell to the page's body, back at its top).
      if (focused && button.hidden) $("messages").focus({ preventScroll: true });
    } catch (error) {
      this.chat.showError(`Could not load older messages: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  }

  // --- busy state, prompts and abort ---

  // Busy: the server says a turn runs, or the newest assistant message is still open
  // (unless it waits for an approval: then a new prompt is allowed, and denies it).
  get busy() {
    if (this.status === "busy" || this.status === "retry") return true;
    return this.log.replyOpen && !this.log.replyAwaiting;
  }

  updateBusy() {
    if (this.closed) return;
    const busy = this.busy;
    // A reply that ends is announced (the status line is a live region): a screen
    // reader's user heard "Working…" and then nothing (QA).
    if (busy) this.finished = false;
    else if (this.wasBusy) this.finished = true;
    this.wasBusy = busy;
    this.chat.showBusy(this.id, {
      busy,
      finished: this.finished,
      waiting: this.pending.size > 0 || this.uploading,
      uploading: this.uploading,
      retry: this.retry,
      awaiting: this.log.replyOpen && this.log.replyAwaiting,
    });
  }

  async sendPrompt(text, files) {
    if (this.busy) return false;
    if (this.openFailed) {
      this.chat.showError(`The conversation did not load, so the prompt was not sent. ${REOPEN}`);
      return false;
    }
    if (files.length === 0 && this.connected) {
      const clientId = randomId();
      this.pending.set(clientId, { text, after: this.log.newestMessageId });
      this.socket.send({ type: "prompt", text, client_id: clientId });
      setTimeout(() => {
        if (this.pending.delete(clientId)) this.updateBusy();
      }, ACK_TIMEOUT);
      this.updateBusy();
      return true;
    }
    // Attachments, or no socket right now: the HTTP API (events arrive over the socket).
    // Until it answers the page says so and Send waits: a slow upload showed nothing,
    // and a second Send uploaded the files again, to be refused as busy (QA).
    if (this.uploading) return false;
    this.uploading = true;
    this.updateBusy();
    try {
      await this.api.prompt(this.id, text, files);
      return true;
    } catch (error) {
      this.chat.showError(`The prompt was not sent: ${error.message}`);
      return false;
    } finally {
      this.uploading = false;
      this.updateBusy();
    }
  }

  // Answer a tool call awaiting approval (the card shows a failure; the log moves it on).
  // Once the answer is in, the keyboard goes back to the prompt box: the card it was
  // given on is drawn anew (and its message moved as the reply goes on), and the focus
  // fell to <body>, so a keyboard user started over from the top of the page.
  async answerApproval(callId, body) {
    const answered = await this.api.answerApproval(this.id, callId, body);
    if (!this.closed) this.chat.composer.focus();
    return answered;
  }

  async abort() {
    if (this.socket.send({ type: "abort" })) return;
    try {
      await this.api.abort(this.id);
    } catch (error) {
      this.chat.showError(`Could not abort: ${error.message}`);
    }
  }
}
