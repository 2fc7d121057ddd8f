// What the page knows of one session: its messages and parts, rebuilt from the
// durable events (by seq), the text deltas (by part and offset) and the snapshots
// the server sends. Plain state, no DOM, no network: it says what it changed and
// what it is missing, and the page does the fetching and the drawing.
//
// Durable events apply in seq order, each exactly once. A repeat is dropped; an
// event past a gap is held back and the gap reported (`gap`: the events after
// `after` and before `before` must be fetched); offering the missing events
// applies them and then whatever was held.
//
// Deltas grow the text of a part still streaming. Offsets count code points (the
// server's `len(str)`), not UTF-16 units. What is already known is dropped or
// trimmed; a delta past the end of the known text is a hole: the page must ask
// for a snapshot (the whole text so far), which replaces the text.
//
// Every apply returns `changes`, in order:
//   {type: "session", data}                   session.created / session.updated
//   {type: "message", message, added, before, at}
//   {type: "message-removed", message}
//   {type: "part", part, added, before}       new, updated, or its text grew
//   {type: "part-removed", part}
//   {type: "compacted"}
// `before` is the id of the message (or part of the same message) the new one
// goes before, in id order, or null for the end. Message records are
// {info, parts: Map}; part records {part, len, message} (`len`: the text's
// length in code points).

import { isAwaiting } from "./approval.js";

// --- code points ------------------------------------------------------------------

const SURROGATE = /[\uD800-\uDFFF]/;

// The length of `text` in code points (Python's len).
export function codePoints(text) {
  if (!SURROGATE.test(text)) return text.length;
  let n = 0;
  for (const _ of text) n += 1;
  return n;
}

// `text` without its first `count` code points.
export function dropCodePoints(text, count) {
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
export function isStreaming(part) {
  return (part.type === "text" || part.type === "reasoning") && Boolean(part.time?.start) && !part.time?.end;
}

const textOf = (part) => (typeof part.text === "string" ? part.text : "");

// The smallest key of `map` greater than `id` (ids sort in creation order), or null.
function nextId(map, id) {
  let found = null;
  for (const key of map.keys()) {
    if (key > id && (found === null || key < found)) found = key;
  }
  return found;
}

// --- the log ----------------------------------------------------------------------

export class SessionLog {
  constructor({ lastSeq = 0 } = {}) {
    this.lastSeq = lastSeq; // the highest seq applied; everything up to it is applied
    this.held = new Map(); // seq -> event that arrived past a gap
    this.messages = new Map(); // message id -> {info, parts: Map(part id -> part record)}
    this.parts = new Map(); // part id -> {part, len, message}
    this.stats = { deltasIgnored: 0 };
  }

  // The events still missing, as {after, before} (exclusive bounds), or null.
  get gap() {
    if (this.held.size === 0) return null;
    return { after: this.lastSeq, before: Math.min(...this.held.keys()) };
  }

  // Forget the events held past a gap (the page resumes after lastSeq instead).
  dropHeld() {
    this.held.clear();
  }

  // --- durable events ---

  // One durable event: {status: "applied" | "repeat" | "held", changes, gap}.
  offerEvent(event) {
    const seq = event?.seq;
    if (!Number.isInteger(seq) || seq <= this.lastSeq || this.held.has(seq)) {
      return { status: "repeat", changes: [], gap: this.gap };
    }
    if (seq > this.lastSeq + 1) {
      this.held.set(seq, event);
      return { status: "held", changes: [], gap: this.gap };
    }
    const changes = this.applyEvent(event);
    this.lastSeq = seq;
    // Whatever waited for this one follows.
    while (this.held.has(this.lastSeq + 1)) {
      const next = this.held.get(this.lastSeq + 1);
      this.held.delete(this.lastSeq + 1);
      changes.push(...this.applyEvent(next));
      this.lastSeq += 1;
    }
    return { status: "applied", changes, gap: this.gap };
  }

  // An event's effect on the projection, whatever its seq.
  applyEvent(event) {
    const data = event.data || {};
    switch (event.type) {
      case "session.created":
      case "session.updated":
        return [{ type: "session", data: { ...data, updated_at: event.at } }];
      case "message.updated":
        return [{ ...this.upsertMessage(data), at: event.at }];
      case "message.removed":
        return this.removeMessage(data.message_id);
      case "part.updated":
        return this.upsertPart(data);
      case "part.removed":
        return this.removePart(data.part_id);
      case "session.compacted":
        return [{ type: "compacted" }];
      default:
        return []; // context.updated: what the model sees; nothing to show
    }
  }

  // A page of history ({info, parts} items). A message already known is kept: the
  // live copy is newer.
  addPage(items) {
    const changes = [];
    for (const item of items) {
      if (this.messages.has(item.info.id)) continue;
      changes.push(this.upsertMessage(item.info));
      for (const part of item.parts) changes.push(...this.upsertPart(part));
    }
    return changes;
  }

  // --- messages and parts ---

  upsertMessage(info) {
    let message = this.messages.get(info.id);
    if (message) {
      message.info = info;
      return { type: "message", message, added: false, before: null };
    }
    const before = nextId(this.messages, info.id);
    message = { info, parts: new Map() };
    this.messages.set(info.id, message);
    return { type: "message", message, added: true, before };
  }

  removeMessage(id) {
    const message = this.messages.get(id);
    if (!message) return [];
    for (const partId of message.parts.keys()) this.parts.delete(partId);
    this.messages.delete(id);
    return [{ type: "message-removed", message }];
  }

  upsertPart(part) {
    const message = this.messages.get(part.message_id);
    if (!message) return []; // a message older than the loaded pages
    const incoming = { ...part };
    let rec = this.parts.get(part.id);
    let added = false;
    let before = null;
    if (!rec) {
      before = nextId(message.parts, part.id);
      rec = { part: incoming, len: 0, message };
      this.parts.set(part.id, rec);
      message.parts.set(part.id, rec);
      added = true;
    } else {
      // A streaming part's event never takes back text that deltas brought.
      const had = rec.part.text;
      if (isStreaming(incoming) && typeof had === "string" && typeof incoming.text === "string") {
        if (had.length > incoming.text.length && had.startsWith(incoming.text)) incoming.text = had;
      }
      rec.part = incoming;
    }
    rec.len = codePoints(textOf(rec.part));
    return [{ type: "part", part: rec, added, before }];
  }

  removePart(id) {
    const rec = this.parts.get(id);
    if (!rec) return [];
    rec.message.parts.delete(id);
    this.parts.delete(id);
    return [{ type: "part-removed", part: rec }];
  }

  // --- streaming text ---

  // A part.delta frame: {status: "applied" | "ignored" | "hole", changes}. On
  // "hole" the page asks the server for a snapshot.
  applyDelta(frame) {
    const rec = this.parts.get(frame.part_id);
    if (!rec || rec.part.time?.end || (frame.field && frame.field !== "text")) {
      this.stats.deltasIgnored += 1; // unknown here, or finished (its event has the whole text)
      return { status: "ignored", changes: [] };
    }
    const delta = String(frame.delta ?? "");
    const size = codePoints(delta);
    const offset = frame.offset;
    const known = rec.len;
    if (!Number.isInteger(offset) || offset < 0 || offset + size <= known) {
      this.stats.deltasIgnored += 1; // already have it (a snapshot covered it), or malformed
      return { status: "ignored", changes: [] };
    }
    if (offset > known) return { status: "hole", changes: [] };
    rec.part.text = textOf(rec.part) + dropCodePoints(delta, known - offset);
    rec.len = offset + size;
    return { status: "applied", changes: [{ type: "part", part: rec, added: false, before: null }] };
  }

  // A part.snapshot frame: the whole text so far of a part still streaming.
  applySnapshot(frame) {
    const rec = this.parts.get(frame.part_id);
    if (!rec || rec.part.time?.end || (frame.field && frame.field !== "text")) {
      return { status: "ignored", changes: [] };
    }
    rec.part.text = String(frame.text ?? "");
    rec.len = codePoints(rec.part.text);
    return { status: "applied", changes: [{ type: "part", part: rec, added: false, before: null }] };
  }

  // --- reading ---

  // Messages in id order (creation order).
  messagesInOrder() {
    return [...this.messages.values()].sort((a, b) => (a.info.id < b.info.id ? -1 : 1));
  }

  // A message's parts in id order.
  partsInOrder(messageId) {
    const message = this.messages.get(messageId);
    if (!message) return [];
    return [...message.parts.values()].sort((a, b) => (a.part.id < b.part.id ? -1 : 1));
  }

  // The newest assistant message is still being written.
  get replyOpen() {
    const latest = this.latestReply();
    return latest !== null && !latest.info.completed_at;
  }

  // The newest assistant message is open and a tool call of it waits for an approval:
  // its turn may be suspended (no process runs it) rather than running.
  get replyAwaiting() {
    const latest = this.latestReply();
    if (latest === null || latest.info.completed_at) return false;
    return [...latest.parts.values()].some((rec) => isAwaiting(rec.part));
  }

  // The id of the newest message held (message ids sort by creation), or "".
  get newestMessageId() {
    let newest = "";
    for (const id of this.messages.keys()) if (id > newest) newest = id;
    return newest;
  }

  // Whether a user message newer than `afterId` holds the text `text`: a prompt sent
  // when `afterId` was the newest message reached the log, though its ack was lost.
  hasPromptAfter(afterId, text) {
    for (const message of this.messages.values()) {
      if (message.info.role !== "user" || !(message.info.id > afterId)) continue;
      for (const rec of message.parts.values()) {
        if (rec.part.type === "text" && rec.part.text === text) return true;
      }
    }
    return false;
  }

  latestReply() {
    let latest = null;
    for (const message of this.messages.values()) {
      if (message.info.role === "assistant" && (!latest || message.info.id > latest.info.id)) latest = message;
    }
    return latest;
  }
}
