// The Forge chat page: sessions on the left, the open conversation on the right.
//
// Opening a session loads its newest page of history over HTTP, then opens the
// session's WebSocket with ?after=<head_seq of that page> and applies frames:
// durable events (in seq order; a gap is filled from /events/), text deltas (by
// offset), snapshots, status, acks and errors. A dropped socket reconnects with
// exponential backoff and resumes after the highest seq applied.
//
// Model text is never put into the page as HTML except through markdown.js,
// which escapes everything first. Everything else uses textContent.

import { renderMarkdown } from "./markdown.js";

const root = document.getElementById("app");
const API = root.dataset.api; // "/api/"
const WS_PATH = root.dataset.wsPath; // "/ws/sessions/"
const LOGIN_URL = root.dataset.loginUrl; // "/login/"
const PAGE_SIZE = 50;
const PING_EVERY = 25000;
const MAX_BACKOFF = 15000;

const $ = (id) => document.getElementById(id);

// --- small helpers --------------------------------------------------------------

// An element with properties and children. Strings become text nodes, never HTML.
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child);
  }
  return node;
}

function cookie(name) {
  for (const item of document.cookie.split(";")) {
    const [key, ...rest] = item.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return "";
}

function randomId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return "c_" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Offsets on the wire count code points (the server's str length), not UTF-16 units.
const SURROGATE = /[\uD800-\uDFFF]/;

function codePoints(text) {
  if (!SURROGATE.test(text)) return text.length;
  let n = 0;
  for (const _ of text) n += 1;
  return n;
}

function dropCodePoints(text, count) {
  if (count <= 0) return text;
  if (!SURROGATE.test(text)) return text.slice(count);
  let index = 0;
  let n = 0;
  for (const ch of text) {
    if (n === count) break;
    index += ch.length;
    n += 1;
  }
  return text.slice(index);
}

// Text or reasoning still being written: started, not ended. (User text has no times.)
function isStreaming(part) {
  return (part.type === "text" || part.type === "reasoning") && Boolean(part.time?.start) && !part.time?.end;
}

// A path on this origin for a URL the API handed out (absolute or not).
function localUrl(url) {
  const parsed = new URL(url, location.href);
  return parsed.pathname + parsed.search;
}

// A URL we may put in an href: this origin's paths, or http(s).
function safeHref(url) {
  if (typeof url !== "string" || url === "") return null;
  try {
    const parsed = new URL(url, location.href);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function formatCost(cost) {
  const value = Number(cost) || 0;
  if (value === 0) return "$0";
  if (value >= 0.01) return `$${value.toFixed(4)}`;
  const fixed = value.toFixed(8).replace(/0+$/, "");
  return fixed === "0." ? "<$0.00000001" : `$${fixed}`;
}

function formatTokens(tokens) {
  const t = tokens || {};
  const parts = [`${t.input ?? 0} in`, `${t.output ?? 0} out`];
  if (t.reasoning) parts.push(`${t.reasoning} reasoning`);
  if (t.cache_read || t.cache_write) parts.push(`cache ${t.cache_read ?? 0} read / ${t.cache_write ?? 0} write`);
  return `tokens: ${parts.join(", ")}`;
}

function formatTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const today = new Date();
  return date.toDateString() === today.toDateString()
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleDateString([], { month: "short", day: "numeric" });
}

function pretty(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

// Insert `node` among `container`'s children, ordered by their data-key (ids sort in
// creation order). New items usually go last, so look from the end; a child that is
// not an item (a notice) stops the search.
function insertSorted(container, node, id, key) {
  let after = container.lastElementChild;
  while (after && after.dataset[key] !== undefined && after.dataset[key] > id) {
    after = after.previousElementSibling;
  }
  if (after) after.after(node);
  else container.prepend(node);
}

// --- the HTTP API -----------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const error = body && typeof body === "object" && body.error ? body.error : {};
    super(error.message || `request failed (HTTP ${status})`);
    this.status = status;
    this.code = error.code || `http_${status}`;
  }
}

function toLogin() {
  location.assign(`${LOGIN_URL}?next=${encodeURIComponent(location.pathname)}`);
}

async function api(url, { method = "GET", json, form } = {}) {
  const headers = { Accept: "application/json" };
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  if (method !== "GET" && method !== "HEAD") headers["X-CSRFToken"] = cookie("csrftoken");
  const response = await fetch(url, { method, headers, body, credentials: "same-origin" });
  if (response.status === 401) {
    toLogin();
    throw new ApiError(401, null);
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

const sessionUrl = (id, rest = "") => `${API}sessions/${encodeURIComponent(id)}/${rest}`;

// --- one open session ---------------------------------------------------------------

class SessionView {
  constructor(chat, session) {
    this.chat = chat;
    this.id = session.id;
    this.status = session.status || "idle";
    this.retry = null;
    this.messages = new Map(); // message id -> {info, parts: Map, el, headEl, partsEl, footEl}
    this.parts = new Map(); // part id -> {part, len, message, el}
    this.lastSeq = 0;
    this.nextUrl = null;
    this.pending = new Map(); // client_id -> prompt text, until acked
    this.ws = null;
    this.generation = 0;
    this.closed = false;
    this.attempt = 0;
    this.reconnectTimer = null;
    this.reconnectQueued = false;
    this.stableTimer = null;
    this.failed = false; // refused for good (no such session): no more reconnects
    this.pingTimer = null;
    this.queue = Promise.resolve();
    this.lastSnapshotRequest = 0;
    this.dirty = new Set();
    this.renderScheduled = false;
    // Counters, for the curious (and the tests): window.forgeChat.view.stats
    this.stats = { connects: 0, reconnects: 0, gapsFilled: 0, snapshotRequests: 0, deltasIgnored: 0 };

    this.listEl = $("message-list");
    this.scroller = $("messages");
  }

  // --- lifecycle ---

  async open() {
    this.listEl.replaceChildren();
    this.setOlder(null);
    this.chat.setConnection("connecting");
    try {
      const [page, session] = await Promise.all([
        api(`${sessionUrl(this.id, "messages/")}?limit=${PAGE_SIZE}`),
        api(sessionUrl(this.id)).catch(() => null),
      ]);
      if (this.closed) return;
      if (session) {
        this.status = session.status;
        this.chat.sessionChanged(session);
      }
      this.lastSeq = page.head_seq;
      this.addPage(page);
      this.scrollToBottom();
      this.updateBusy();
      this.connect();
    } catch (error) {
      if (this.closed) return;
      this.chat.setConnection("failed");
      this.chat.showError(`Could not open the session: ${error.message}`);
    }
  }

  close() {
    this.closed = true;
    this.generation += 1;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.stableTimer);
    this.stopPing();
    if (this.ws) this.ws.close(1000, "closed");
    this.ws = null;
  }

  connect() {
    if (this.closed) return;
    const generation = ++this.generation;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}${WS_PATH}${encodeURIComponent(this.id)}/?after=${this.lastSeq}`;
    const ws = new WebSocket(url);
    this.ws = ws;
    this.stats.connects += 1;
    this.chat.setConnection(this.stats.connects > 1 ? "reconnecting" : "connecting");
    ws.addEventListener("open", () => {
      if (generation !== this.generation) return;
      // The backoff starts over once this socket proves itself (a frame, or 5 s open).
      this.stableTimer = setTimeout(() => {
        this.attempt = 0;
      }, 5000);
      this.chat.setConnection("open");
      this.startPing();
      this.updateBusy();
      // Status frames are not replayed: ask what the session is doing now.
      if (this.stats.connects > 1) this.refreshStatus();
    });
    ws.addEventListener("message", (event) => {
      if (generation !== this.generation) return;
      this.attempt = 0;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      this.enqueue(frame);
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
    this.updateBusy();
    if (this.closed) return;
    if (event.code === 4401) {
      toLogin();
      return;
    }
    if (event.code === 4404 || event.code === 4400) {
      this.failed = true;
      this.chat.setConnection("failed");
      this.chat.showError(event.code === 4404 ? "This session does not exist." : "The server refused the connection.");
      return;
    }
    this.scheduleReconnect();
  }

  scheduleReconnect() {
    clearTimeout(this.reconnectTimer);
    const base = Math.min(MAX_BACKOFF, 500 * 2 ** this.attempt);
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.attempt += 1;
    this.chat.setConnection("waiting", delay);
    this.reconnectTimer = setTimeout(() => this.reconnectNow(), delay);
  }

  reconnectNow() {
    if (this.closed || this.failed || this.ws || this.reconnectQueued) return;
    clearTimeout(this.reconnectTimer);
    this.stats.reconnects += 1;
    this.reconnectQueued = true;
    // Frames of the old socket still being applied come first: resume after them.
    this.queue = this.queue.then(() => {
      this.reconnectQueued = false;
      this.connect();
    });
  }

  // Drop this socket (and what it still sends) and resume from the last applied seq.
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
    this.pingTimer = setInterval(() => this.sendFrame({ type: "ping" }), PING_EVERY);
  }

  stopPing() {
    clearInterval(this.pingTimer);
    this.pingTimer = null;
  }

  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  sendFrame(frame) {
    if (!this.connected) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  async refreshStatus() {
    try {
      const session = await api(sessionUrl(this.id));
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
    this.queue = this.queue
      .then(() => this.handleFrame(frame))
      .catch((error) => console.error("forge: a frame could not be applied", frame, error));
  }

  async handleFrame(frame) {
    if (this.closed) return;
    switch (frame.kind) {
      case "event":
        await this.handleEvent(frame);
        break;
      case "delta":
        this.applyDelta(frame);
        break;
      case "snapshot":
        this.applySnapshot(frame);
        break;
      case "status":
        this.applyStatus(frame);
        break;
      case "ack":
        this.pending.delete(frame.client_id);
        this.updateBusy();
        break;
      case "error":
        this.applyError(frame);
        break;
      default:
        break; // pong, and kinds this page does not know
    }
  }

  async handleEvent(event) {
    if (event.seq <= this.lastSeq) return; // already applied
    if (event.seq > this.lastSeq + 1) {
      try {
        await this.fillGap(event.seq);
      } catch (error) {
        console.warn("forge: could not fill a gap in the log; reconnecting", error);
        this.restart();
        return;
      }
      if (event.seq !== this.lastSeq + 1) {
        this.restart();
        return;
      }
    }
    this.applyEvent(event);
    this.lastSeq = event.seq;
  }

  // Fetch and apply the events between the last applied seq and `upto` (exclusive).
  async fillGap(upto) {
    let url = `${sessionUrl(this.id, "events/")}?after=${this.lastSeq}`;
    while (url && this.lastSeq < upto - 1) {
      const page = await api(url);
      if (this.closed) return;
      for (const event of page.results) {
        if (event.seq >= upto) return;
        if (event.seq !== this.lastSeq + 1) continue;
        this.applyEvent(event);
        this.lastSeq = event.seq;
        this.stats.gapsFilled += 1;
      }
      url = page.next ? localUrl(page.next) : null;
    }
  }

  applyEvent(event) {
    const data = event.data || {};
    switch (event.type) {
      case "session.created":
      case "session.updated":
        this.chat.sessionChanged({ ...data, updated_at: event.at });
        break;
      case "message.updated":
        this.upsertMessage(data);
        this.chat.touchSession(this.id, event.at);
        break;
      case "message.removed":
        this.removeMessage(data.message_id);
        break;
      case "part.updated":
        this.upsertPart(data);
        break;
      case "part.removed":
        this.removePart(data.part_id);
        break;
      case "session.compacted":
        this.notice("The conversation was compacted.");
        break;
      default:
        break; // context.updated: what the model sees; nothing to show here
    }
    this.updateBusy();
  }

  applyDelta(frame) {
    const rec = this.parts.get(frame.part_id);
    if (!rec || rec.part.time?.end) {
      this.stats.deltasIgnored += 1; // unknown here, or finished (its event has the whole text)
      return;
    }
    const delta = String(frame.delta ?? "");
    const size = codePoints(delta);
    const known = rec.len;
    if (frame.offset + size <= known) {
      this.stats.deltasIgnored += 1; // already have it (a snapshot covered it)
      return;
    }
    if (frame.offset > known) {
      this.requestSnapshot(); // a hole: ask for the text so far
      return;
    }
    rec.part.text = (rec.part.text ?? "") + dropCodePoints(delta, known - frame.offset);
    rec.len = frame.offset + size;
    this.scheduleRender(rec);
  }

  applySnapshot(frame) {
    const rec = this.parts.get(frame.part_id);
    if (!rec || rec.part.time?.end || (frame.field && frame.field !== "text")) return;
    rec.part.text = String(frame.text ?? "");
    rec.len = codePoints(rec.part.text);
    this.scheduleRender(rec);
  }

  requestSnapshot() {
    const now = Date.now();
    if (now - this.lastSnapshotRequest < 1000) return;
    if (this.sendFrame({ type: "snapshot" })) {
      this.lastSnapshotRequest = now;
      this.stats.snapshotRequests += 1;
    }
  }

  applyStatus(frame) {
    const wasBusy = this.status !== "idle";
    this.status = frame.status;
    this.retry = frame.status === "retry" ? { attempt: frame.attempt, next_at: frame.next_at } : null;
    this.updateBusy();
    if (wasBusy && frame.status === "idle") this.chat.refreshSessionsSoon();
  }

  applyError(frame) {
    const text = this.pending.get(frame.client_id);
    if (text !== undefined) {
      this.pending.delete(frame.client_id);
      const promptEl = $("prompt");
      if (promptEl.value.trim() === "") promptEl.value = text; // give the prompt back
    }
    this.chat.showError(`${frame.message || "Something went wrong"} (${frame.code || "error"})`);
    this.updateBusy();
  }

  // --- history ---

  addPage(page) {
    for (const item of page.results) {
      if (this.messages.has(item.info.id)) continue; // the live copy is newer
      this.upsertMessage(item.info);
      for (const part of item.parts) this.upsertPart(part);
    }
    this.setOlder(page.next);
    this.flushRender();
  }

  setOlder(next) {
    this.nextUrl = next;
    $("load-older").hidden = !next;
  }

  async loadOlder() {
    if (!this.nextUrl) return;
    const button = $("load-older");
    button.disabled = true;
    try {
      const page = await api(localUrl(this.nextUrl));
      if (this.closed) return;
      const before = this.scroller.scrollHeight;
      const top = this.scroller.scrollTop;
      this.addPage(page);
      this.scroller.scrollTop = top + (this.scroller.scrollHeight - before);
    } catch (error) {
      this.chat.showError(`Could not load older messages: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  }

  // --- messages ---

  upsertMessage(info) {
    let rec = this.messages.get(info.id);
    if (!rec) {
      rec = { info, parts: new Map() };
      rec.el = el("article", {
        className: `message message-${info.role}`,
        dataset: { messageId: info.id, role: info.role },
      });
      rec.headEl = el("header", { className: "message-head" });
      rec.partsEl = el("div", { className: "message-parts" });
      rec.footEl = el("footer", { className: "message-foot" });
      rec.el.append(rec.headEl, rec.partsEl, rec.footEl);
      this.messages.set(info.id, rec);
      this.stickToBottom(() => insertSorted(this.listEl, rec.el, info.id, "messageId"));
    } else {
      rec.info = info;
    }
    // A finished message shows its parts as they finished, never a frame behind.
    if (info.completed_at) this.flushRender();
    this.renderMessageMeta(rec);
    return rec;
  }

  removeMessage(id) {
    const rec = this.messages.get(id);
    if (!rec) return;
    for (const partId of rec.parts.keys()) this.parts.delete(partId);
    rec.el.remove();
    this.messages.delete(id);
  }

  renderMessageMeta(rec) {
    const info = rec.info;
    const assistant = info.role === "assistant";
    const open = assistant && !info.completed_at;
    rec.el.dataset.state = info.error ? "error" : open ? "streaming" : "done";
    rec.el.classList.toggle("message-summary", Boolean(info.summary));
    rec.el.setAttribute("aria-busy", open ? "true" : "false");
    const head = [el("span", { className: "role", text: assistant ? "Assistant" : info.role === "user" ? "You" : info.role })];
    if (info.agent) head.push(el("span", { className: "agent", text: info.agent }));
    if (assistant && info.model?.model) {
      head.push(el("span", { className: "model", text: `${info.model.provider}/${info.model.model}` }));
    }
    if (info.created_at) {
      head.push(el("time", { datetime: info.created_at, title: info.created_at, text: formatTime(info.created_at) }));
    }
    if (open) head.push(el("span", { className: "working", text: "working…" }));
    rec.headEl.replaceChildren(...head);

    const foot = [];
    if (info.error) {
      foot.push(
        el(
          "div",
          { className: "message-error", role: "status" },
          el("strong", { text: info.error.name || "Error" }),
          ": ",
          info.error.message || "",
        ),
      );
    }
    if (assistant && info.completed_at) {
      const summary = [];
      if (info.finish) summary.push(`finish: ${info.finish}`);
      summary.push(formatTokens(info.tokens));
      summary.push(`total cost: ${formatCost(info.cost)}`);
      foot.push(el("div", { className: "message-totals", text: summary.join(" · ") }));
    }
    rec.footEl.replaceChildren(...foot);
    rec.footEl.hidden = foot.length === 0;
  }

  // --- parts ---

  upsertPart(part) {
    const message = this.messages.get(part.message_id);
    if (!message) return; // a message older than the loaded pages
    let rec = this.parts.get(part.id);
    const incoming = { ...part };
    if (!rec) {
      rec = { part: incoming, message, len: 0 };
      rec.el = el("div", { className: `part part-${part.type}`, dataset: { partId: part.id, type: part.type } });
      this.parts.set(part.id, rec);
      message.parts.set(part.id, rec);
      insertSorted(message.partsEl, rec.el, part.id, "partId");
    } else {
      // A streaming part's start event never takes back text that deltas brought.
      const had = rec.part.text;
      if (isStreaming(incoming) && typeof had === "string" && typeof incoming.text === "string") {
        if (had.length > incoming.text.length && had.startsWith(incoming.text)) incoming.text = had;
      }
      rec.part = incoming;
    }
    rec.len = codePoints(typeof rec.part.text === "string" ? rec.part.text : "");
    this.scheduleRender(rec);
  }

  removePart(id) {
    const rec = this.parts.get(id);
    if (!rec) return;
    rec.el.remove();
    rec.message.parts.delete(id);
    this.parts.delete(id);
  }

  scheduleRender(rec) {
    this.dirty.add(rec);
    if (this.renderScheduled) return;
    this.renderScheduled = true;
    requestAnimationFrame(() => this.flushRender());
  }

  flushRender() {
    this.renderScheduled = false;
    if (this.dirty.size === 0) return;
    const dirty = [...this.dirty];
    this.dirty.clear();
    this.stickToBottom(() => {
      for (const rec of dirty) if (this.parts.get(rec.part.id) === rec) this.renderPart(rec);
    });
  }

  renderPart(rec) {
    const part = rec.part;
    const role = rec.message.info.role;
    rec.el.dataset.streaming = isStreaming(part) ? "true" : "false";
    switch (part.type) {
      case "text":
        return this.renderText(rec, role);
      case "reasoning":
        return this.renderReasoning(rec);
      case "tool":
        return this.renderTool(rec);
      case "step-start":
        rec.el.hidden = true;
        return;
      case "step-finish":
        return rec.el.replaceChildren(
          el("span", { className: "step-label", text: "step" }),
          el("span", { text: part.reason ? `finish: ${part.reason}` : "" }),
          el("span", { className: "step-tokens", text: formatTokens(part.tokens) }),
          el("span", { className: "step-cost", text: `cost: ${formatCost(part.cost)}` }),
        );
      case "patch":
        return this.renderPatch(rec);
      case "file":
        return this.renderFile(rec);
      case "agent":
        return rec.el.replaceChildren(el("span", { className: "badge", text: `@${part.name}` }));
      case "subtask":
        return this.renderSubtask(rec);
      case "compaction":
        // A divider: what lies above was summarized for the model (it stays here, readable).
        rec.message.el.classList.add("message-compaction");
        return rec.el.replaceChildren(
          el(
            "div",
            { className: "compaction-divider", role: "separator" },
            el("span", { text: part.auto ? "Earlier messages summarized (automatically)" : "Earlier messages summarized" }),
          ),
        );
      default:
        return rec.el.replaceChildren(el("span", { className: "muted", text: `[${part.type}]` }));
    }
  }

  renderText(rec, role) {
    const text = rec.part.text ?? "";
    if (rec.part.synthetic) {
      // Text the runtime added (e.g. an attached file's content): shown folded, as text.
      rec.el.replaceChildren(
        el("details", { className: "synthetic" }, el("summary", { text: "Attached text" }), el("pre", { text })),
      );
      return;
    }
    if (role === "assistant") {
      if (!rec.body) {
        rec.body = el("div", { className: "markdown" });
        if (rec.message.info.summary) {
          // The summary the model continues from: folded, expandable.
          rec.el.replaceChildren(
            el("details", { className: "compaction-summary" }, el("summary", { text: "Summary of the earlier messages" }), rec.body),
          );
        } else {
          rec.el.replaceChildren(rec.body);
        }
      }
      rec.body.innerHTML = renderMarkdown(text); // escaped first, by construction
      return;
    }
    rec.el.replaceChildren(el("div", { className: "plain-text", text }));
  }

  renderReasoning(rec) {
    const streaming = isStreaming(rec.part);
    if (!rec.details) {
      rec.summary = el("summary");
      rec.body = el("div", { className: "markdown reasoning-body" });
      rec.details = el("details", { className: "reasoning" }, rec.summary, rec.body);
      rec.details.open = streaming;
      rec.summary.addEventListener("click", () => {
        rec.toggled = true;
      });
      rec.el.replaceChildren(rec.details);
    }
    rec.summary.textContent = streaming ? "Reasoning…" : "Reasoning";
    if (!streaming && !rec.toggled && rec.wasStreaming) rec.details.open = false;
    rec.wasStreaming = streaming;
    rec.body.innerHTML = renderMarkdown(rec.part.text ?? ""); // escaped first, by construction
  }

  renderTool(rec) {
    const part = rec.part;
    const state = part.state || { status: "pending" };
    const status = state.status || "pending";
    rec.el.dataset.status = status;
    rec.open = rec.open || { input: false, output: true };
    const section = (name, label, value) => {
      const details = el("details", { className: `tool-${name}` }, el("summary", { text: label }), el("pre", { text: pretty(value) }));
      details.open = rec.open[name];
      details.addEventListener("toggle", () => {
        rec.open[name] = details.open;
      });
      return details;
    };
    const children = [
      el(
        "div",
        { className: "tool-head" },
        el("span", { className: "tool-name", text: part.tool }),
        state.title ? el("span", { className: "tool-title", text: state.title }) : null,
        el("span", { className: `status-badge status-${status}`, text: status }),
      ),
    ];
    if (state.input !== undefined && status !== "pending") children.push(section("input", "Input", state.input));
    if (status === "completed") children.push(section("output", "Output", state.output));
    if (status === "error") {
      children.push(el("div", { className: "tool-error", text: `Error: ${pretty(state.error)}` }));
      if (state.metadata?.interrupted) children.push(el("div", { className: "muted", text: "interrupted" }));
    }
    rec.el.replaceChildren(el("div", { className: "tool-card" }, ...children));
  }

  renderPatch(rec) {
    const files = Array.isArray(rec.part.files) ? rec.part.files : [];
    rec.el.replaceChildren(
      el(
        "div",
        { className: "patch" },
        el("span", { className: "patch-label", text: `Changed ${files.length} file${files.length === 1 ? "" : "s"}` }),
        el("ul", {}, files.map((file) => el("li", {}, el("code", { text: String(file) })))),
        rec.part.hash ? el("span", { className: "muted", text: `snapshot ${String(rec.part.hash).slice(0, 12)}` }) : null,
      ),
    );
  }

  renderFile(rec) {
    const part = rec.part;
    const name = part.filename || "file";
    const href = safeHref(part.url);
    const label = `${name}${part.mime ? ` (${part.mime})` : ""}`;
    rec.el.replaceChildren(
      el(
        "div",
        { className: "file" },
        "📎 ",
        href ? el("a", { href, rel: "noopener noreferrer", target: "_blank", text: label }) : el("span", { text: label }),
      ),
    );
  }

  renderSubtask(rec) {
    const part = rec.part;
    const children = [
      el("div", { className: "subtask-head" }, el("span", { className: "badge", text: `@${part.agent}` }), " ", part.description || "subtask"),
      el("pre", { className: "subtask-prompt", text: part.prompt || "" }),
    ];
    if (part.child_session_id) {
      children.push(
        el("button", {
          type: "button",
          className: "link-button",
          text: "Open the subtask's session",
          onclick: () => this.chat.select(part.child_session_id),
        }),
      );
    }
    rec.el.replaceChildren(el("div", { className: "subtask" }, ...children));
  }

  notice(text) {
    this.listEl.append(el("div", { className: "notice", role: "status", text }));
  }

  // --- busy state, prompts and abort ---

  // Busy: the server says a turn runs, or the newest assistant message is still open.
  get busy() {
    if (this.status === "busy" || this.status === "retry") return true;
    let latest = null;
    for (const rec of this.messages.values()) {
      if (rec.info.role === "assistant" && (!latest || rec.info.id > latest.info.id)) latest = rec;
    }
    return latest !== null && !latest.info.completed_at;
  }

  updateBusy() {
    if (this.closed) return;
    const busy = this.busy;
    $("abort-button").disabled = !busy;
    $("send-button").disabled = busy || this.pending.size > 0;
    root.dataset.busy = busy ? "true" : "false";
    const status = $("turn-status");
    if (this.retry) {
      const at = this.retry.next_at ? ` at ${formatTime(this.retry.next_at)}` : "";
      status.textContent = `The model is unavailable; retrying (attempt ${this.retry.attempt ?? "?"})${at}…`;
    } else {
      status.textContent = busy ? "Working…" : "";
    }
    this.chat.setSessionBusy(this.id, busy);
  }

  async sendPrompt(text, files) {
    if (this.busy) return false;
    if (files.length === 0 && this.connected) {
      const clientId = randomId();
      this.pending.set(clientId, text);
      this.sendFrame({ type: "prompt", text, client_id: clientId });
      setTimeout(() => {
        if (this.pending.delete(clientId)) this.updateBusy();
      }, 15000);
      this.updateBusy();
      return true;
    }
    // Attachments, or no socket right now: the HTTP API (events arrive over the socket).
    // JSON unless there are files: a form would turn the text's line breaks into CRLF.
    let request;
    if (files.length === 0) {
      request = { method: "POST", json: { text } };
    } else {
      const form = new FormData();
      form.append("text", text);
      for (const file of files) form.append("files", file);
      request = { method: "POST", form };
    }
    try {
      await api(sessionUrl(this.id, "messages/"), request);
      return true;
    } catch (error) {
      this.chat.showError(`The prompt was not sent: ${error.message}`);
      return false;
    }
  }

  async abort() {
    if (this.sendFrame({ type: "abort" })) return;
    try {
      await api(sessionUrl(this.id, "abort/"), { method: "POST" });
    } catch (error) {
      this.chat.showError(`Could not abort: ${error.message}`);
    }
  }

  // --- scrolling ---

  stickToBottom(change) {
    const s = this.scroller;
    const atBottom = s.scrollHeight - s.scrollTop - s.clientHeight < 80;
    change();
    if (atBottom) s.scrollTop = s.scrollHeight;
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }
}

// --- the page -------------------------------------------------------------------------

class Chat {
  constructor() {
    this.sessions = new Map();
    this.sessionsNext = null;
    this.loadedMore = false;
    this.view = null;
    this.opening = null; // the session being opened, until its view exists
    this.refreshTimer = null;
    this.errorTimer = null;
  }

  start() {
    $("new-session").addEventListener("click", () => this.createSession());
    $("more-sessions").addEventListener("click", () => this.loadMoreSessions());
    $("load-older").addEventListener("click", () => this.view?.loadOlder());
    $("abort-button").addEventListener("click", () => this.view?.abort());
    $("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      this.submitPrompt();
    });
    $("prompt").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submitPrompt();
      }
    });
    $("rename-button").addEventListener("click", () => this.startRename());
    $("rename-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.finishRename();
    });
    $("rename-cancel").addEventListener("click", () => this.stopRename());
    $("delete-button").addEventListener("click", () => this.deleteSession());
    $("error-close").addEventListener("click", () => this.hideError());
    window.addEventListener("hashchange", () => this.followHash());
    window.addEventListener("online", () => this.view?.reconnectNow());
    window.addEventListener("focus", () => this.refreshSessionsSoon());
    this.showConversation(false);
    this.loadSessions().then(() => this.followHash());
  }

  // --- sessions ---

  async loadSessions() {
    try {
      const page = await api(`${API}sessions/?limit=50`);
      // Sessions as recent as this page's that it lacks were deleted elsewhere.
      const oldest = page.results.length ? page.results[page.results.length - 1].updated_at : "";
      const listed = new Set(page.results.map((session) => session.id));
      for (const [id, session] of this.sessions) {
        if (!listed.has(id) && id !== this.view?.id && (!page.next || session.updated_at >= oldest)) {
          this.sessions.delete(id);
        }
      }
      for (const session of page.results) this.sessions.set(session.id, { ...this.sessions.get(session.id), ...session });
      if (!this.loadedMore) this.sessionsNext = page.next; // else: "more" already went further
      this.renderSessions();
    } catch (error) {
      this.showError(`Could not list sessions: ${error.message}`);
    }
  }

  async loadMoreSessions() {
    if (!this.sessionsNext) return;
    try {
      const page = await api(localUrl(this.sessionsNext));
      this.loadedMore = true;
      for (const session of page.results) this.sessions.set(session.id, session);
      this.sessionsNext = page.next;
      this.renderSessions();
    } catch (error) {
      this.showError(`Could not list sessions: ${error.message}`);
    }
  }

  refreshSessionsSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.loadSessions(), 300);
  }

  renderSessions() {
    const list = $("session-list");
    const sessions = [...this.sessions.values()].sort((a, b) =>
      a.updated_at === b.updated_at ? (a.id < b.id ? 1 : -1) : a.updated_at < b.updated_at ? 1 : -1,
    );
    const current = this.view?.id;
    list.replaceChildren(
      ...sessions.map((session) =>
        el(
          "li",
          {},
          el(
            "a",
            {
              href: `#/s/${encodeURIComponent(session.id)}`,
              className: "session-item",
              dataset: { sessionId: session.id, status: session.status || "idle" },
              "aria-current": session.id === current ? "page" : null,
            },
            el("span", { className: "session-title", text: session.title || "Untitled" }),
            el("span", { className: "session-meta" }, session.status === "busy" ? el("span", { className: "busy-dot", title: "working", text: "●" }) : null, formatTime(session.updated_at)),
          ),
        ),
      ),
    );
    $("sessions-empty").hidden = sessions.length > 0;
    $("more-sessions").hidden = !this.sessionsNext;
  }

  sessionChanged(data) {
    if (!data || !data.id) return;
    const known = this.sessions.get(data.id) || { status: "idle" };
    const merged = { ...known, ...data };
    if (known.updated_at && data.updated_at && known.updated_at > data.updated_at) merged.updated_at = known.updated_at;
    this.sessions.set(data.id, merged);
    this.renderSessions();
    if (this.view?.id === data.id) this.renderHeader();
  }

  touchSession(id, at) {
    const session = this.sessions.get(id);
    if (!session || !at || (session.updated_at && session.updated_at >= at)) return;
    session.updated_at = at;
    this.renderSessions();
  }

  setSessionBusy(id, busy) {
    const session = this.sessions.get(id);
    const status = busy ? "busy" : "idle";
    if (!session || session.status === status) return;
    session.status = status;
    this.renderSessions();
  }

  async createSession() {
    try {
      const session = await api(`${API}sessions/`, { method: "POST", json: {} });
      this.sessions.set(session.id, session);
      this.renderSessions();
      this.select(session.id);
    } catch (error) {
      this.showError(`Could not create a session: ${error.message}`);
    }
  }

  followHash() {
    const match = location.hash.match(/^#\/s\/([A-Za-z0-9_-]+)$/);
    if (match) this.open(match[1]);
  }

  select(id) {
    const hash = `#/s/${encodeURIComponent(id)}`;
    if (location.hash !== hash) location.hash = hash; // hashchange opens it
    else this.open(id);
  }

  async open(id) {
    if (this.view?.id === id && !this.view.closed) return;
    // Claimed before any await: a second call for the same session (a click and the
    // hashchange it causes) must not make a second view of it.
    if (this.opening === id) return;
    this.opening = id;
    if (this.view) this.view.close();
    this.view = null;
    this.stopRename();
    this.hideError();
    let session = this.sessions.get(id);
    if (!session) {
      try {
        session = await api(sessionUrl(id));
        this.sessions.set(id, session);
      } catch (error) {
        if (this.opening === id) this.opening = null;
        this.showError(`Could not open the session: ${error.message}`);
        return;
      }
    }
    if (this.opening !== id) return; // another session was chosen meanwhile
    this.opening = null;
    this.view = new SessionView(this, session);
    this.showConversation(true);
    this.renderHeader();
    this.renderSessions();
    await this.view.open();
    $("prompt").focus();
  }

  showConversation(open) {
    $("conversation").hidden = !open;
    $("empty-state").hidden = open;
    if (!open) this.setConnection("idle");
  }

  renderHeader() {
    const session = this.view && this.sessions.get(this.view.id);
    $("session-title").textContent = session ? session.title || "Untitled" : "";
  }

  startRename() {
    if (!this.view) return;
    const session = this.sessions.get(this.view.id);
    $("rename-input").value = session?.title || "";
    $("rename-form").hidden = false;
    $("title-row").hidden = true;
    $("rename-input").focus();
  }

  stopRename() {
    $("rename-form").hidden = true;
    $("title-row").hidden = false;
  }

  async finishRename() {
    if (!this.view) return;
    const id = this.view.id;
    try {
      const session = await api(sessionUrl(id), { method: "PATCH", json: { title: $("rename-input").value.trim() } });
      this.sessionChanged(session);
      this.stopRename();
      $("rename-button").focus();
    } catch (error) {
      this.showError(`Could not rename: ${error.message}`);
    }
  }

  async deleteSession() {
    if (!this.view) return;
    const id = this.view.id;
    const title = this.sessions.get(id)?.title || "this session";
    if (!window.confirm(`Delete “${title}” and its whole history?`)) return;
    try {
      await api(sessionUrl(id), { method: "DELETE" });
      this.view.close();
      this.view = null;
      this.sessions.delete(id);
      this.renderSessions();
      this.showConversation(false);
      history.replaceState(null, "", location.pathname);
    } catch (error) {
      this.showError(`Could not delete: ${error.message}`);
    }
  }

  // --- the composer ---

  async submitPrompt() {
    const view = this.view;
    const promptEl = $("prompt");
    const filesEl = $("files");
    const text = promptEl.value;
    const files = [...filesEl.files];
    if (!view || (text.trim() === "" && files.length === 0)) return;
    if (view.busy || view.pending.size > 0) return;
    promptEl.value = "";
    const sent = await view.sendPrompt(text, files);
    if (sent) {
      filesEl.value = "";
    } else if (promptEl.value === "") {
      promptEl.value = text;
    }
    promptEl.focus();
  }

  // --- status line ---

  setConnection(state, delay = 0) {
    const indicator = $("connection");
    indicator.dataset.state = state;
    const labels = {
      idle: "Not connected",
      connecting: "Connecting…",
      reconnecting: "Reconnecting…",
      open: "Live",
      waiting: `Disconnected; retrying in ${Math.max(1, Math.round(delay / 1000))} s`,
      failed: "Disconnected",
    };
    indicator.textContent = labels[state] || state;
    indicator.title = state === "open" ? "Connected: updates arrive as they happen" : indicator.textContent;
  }

  showError(text) {
    $("error-text").textContent = text;
    $("error-banner").hidden = false;
    clearTimeout(this.errorTimer);
    this.errorTimer = setTimeout(() => this.hideError(), 15000);
  }

  hideError() {
    $("error-banner").hidden = true;
  }
}

const chat = new Chat();
chat.start();

// A handle for debugging in the console, and for the browser tests.
window.forgeChat = {
  chat,
  get view() {
    return chat.view;
  },
  // Close the socket as a network failure would: the page reconnects and resumes.
  disconnectForTest() {
    const ws = chat.view?.ws;
    if (ws) ws.close(4000, "test");
  },
};
