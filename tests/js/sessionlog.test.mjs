// The session log's state logic, without a browser: node --test tests/js/

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { codePoints, dropCodePoints, isStreaming, SessionLog } from "../../static/forge/sessionlog.js";

// --- building events and frames --------------------------------------------------

const AT = "2025-01-01T00:00:00.000Z";

function event(seq, type, data) {
  return { seq, id: `evt_${seq}`, session_id: "ses_1", type, at: AT, data };
}

const message = (id, role = "assistant", extra = {}) => ({ id, session_id: "ses_1", role, ...extra });

function textPart(id, text = "", { messageId = "msg_2", end = false, type = "text" } = {}) {
  return {
    id,
    message_id: messageId,
    session_id: "ses_1",
    type,
    text,
    time: end ? { start: AT, end: AT } : { start: AT },
  };
}

const delta = (partId, offset, text) => ({
  kind: "delta",
  type: "part.delta",
  session_id: "ses_1",
  message_id: "msg_2",
  part_id: partId,
  field: "text",
  offset,
  delta: text,
});

const snapshot = (partId, text) => ({
  kind: "snapshot",
  type: "part.snapshot",
  session_id: "ses_1",
  message_id: "msg_2",
  part_id: partId,
  field: "text",
  text,
});

// A log at seq 2 holding an assistant message msg_2 with a streaming text part prt_1.
function streamingLog(text = "") {
  const log = new SessionLog();
  log.offerEvent(event(1, "message.updated", message("msg_2")));
  log.offerEvent(event(2, "part.updated", textPart("prt_1", text)));
  return log;
}

const textOf = (log, id = "prt_1") => log.parts.get(id).part.text;
const lenOf = (log, id = "prt_1") => log.parts.get(id).len;

// --- code points -----------------------------------------------------------------

describe("code points", () => {
  test("count like Python's len, not UTF-16 units", () => {
    assert.equal(codePoints(""), 0);
    assert.equal(codePoints("abc"), 3);
    assert.equal(codePoints("é"), 1);
    assert.equal(codePoints("😀"), 1);
    assert.equal("😀".length, 2);
    assert.equal(codePoints("a😀b👍🏽"), 5); // 👍🏽 is two code points (a modifier follows)
  });

  test("dropping code points never splits a surrogate pair", () => {
    assert.equal(dropCodePoints("abc", 0), "abc");
    assert.equal(dropCodePoints("abc", 2), "c");
    assert.equal(dropCodePoints("😀😁😂", 1), "😁😂");
    assert.equal(dropCodePoints("a😀b", 2), "b");
    assert.equal(dropCodePoints("a😀", 5), "");
    assert.equal(dropCodePoints("a😀", -1), "a😀");
  });

  test("streaming: text or reasoning started and not ended", () => {
    assert.equal(isStreaming(textPart("p", "x")), true);
    assert.equal(isStreaming(textPart("p", "x", { type: "reasoning" })), true);
    assert.equal(isStreaming(textPart("p", "x", { end: true })), false);
    assert.equal(isStreaming({ id: "p", type: "text", text: "user text" }), false);
    assert.equal(isStreaming({ id: "p", type: "tool", time: { start: AT } }), false);
  });
});

// --- durable events ------------------------------------------------------------------

describe("durable events", () => {
  test("apply in seq order and build messages and parts", () => {
    const log = new SessionLog();
    const first = log.offerEvent(event(1, "message.updated", message("msg_1", "user")));
    assert.equal(first.status, "applied");
    assert.equal(first.gap, null);
    assert.deepEqual(first.changes.map((c) => [c.type, c.added, c.at]), [["message", true, AT]]);
    const second = log.offerEvent(event(2, "part.updated", { ...textPart("prt_1", "hi", { messageId: "msg_1" }), time: undefined }));
    assert.equal(second.status, "applied");
    assert.equal(second.changes[0].type, "part");
    assert.equal(second.changes[0].added, true);
    assert.equal(log.lastSeq, 2);
    assert.equal(log.messages.get("msg_1").info.role, "user");
    const rec = log.parts.get("prt_1");
    assert.equal(rec.part.text, "hi");
    assert.equal(rec.len, 2);
    assert.equal(rec.message, log.messages.get("msg_1"));
    assert.equal(log.messages.get("msg_1").parts.get("prt_1"), rec);
  });

  test("starts after the seq it is given", () => {
    const log = new SessionLog({ lastSeq: 7 });
    assert.equal(log.offerEvent(event(7, "message.updated", message("msg_1"))).status, "repeat");
    assert.equal(log.offerEvent(event(8, "message.updated", message("msg_1"))).status, "applied");
    assert.equal(log.lastSeq, 8);
  });

  test("a repeated event is ignored", () => {
    const log = new SessionLog();
    log.offerEvent(event(1, "message.updated", message("msg_1", "user")));
    log.offerEvent(event(2, "message.updated", message("msg_2")));
    const again = log.offerEvent(event(1, "message.updated", message("msg_1", "user", { agent: "changed" })));
    assert.equal(again.status, "repeat");
    assert.deepEqual(again.changes, []);
    assert.equal(log.messages.get("msg_1").info.agent, undefined);
    assert.equal(log.offerEvent(event(2, "message.removed", { message_id: "msg_2" })).status, "repeat");
    assert.ok(log.messages.has("msg_2"));
    assert.equal(log.lastSeq, 2);
  });

  test("an event without a usable seq is ignored", () => {
    const log = new SessionLog();
    assert.equal(log.offerEvent(event(undefined, "message.updated", message("msg_1"))).status, "repeat");
    assert.equal(log.offerEvent(event("1", "message.updated", message("msg_1"))).status, "repeat");
    assert.equal(log.messages.size, 0);
    assert.equal(log.lastSeq, 0);
  });

  test("a gap is reported, held back, and filled when the missing events arrive", () => {
    const log = new SessionLog();
    log.offerEvent(event(1, "message.updated", message("msg_1", "user")));
    const early = log.offerEvent(event(4, "part.updated", textPart("prt_1", "done", { end: true })));
    assert.equal(early.status, "held");
    assert.deepEqual(early.changes, []);
    assert.deepEqual(early.gap, { after: 1, before: 4 });
    assert.deepEqual(log.gap, { after: 1, before: 4 });
    assert.equal(log.lastSeq, 1);
    assert.equal(log.parts.size, 0); // not applied out of order

    // A later event past the same gap is held too; the gap still ends at 4.
    assert.equal(log.offerEvent(event(5, "session.compacted", {})).status, "held");
    assert.deepEqual(log.gap, { after: 1, before: 4 });
    // The held event arriving again is a repeat.
    assert.equal(log.offerEvent(event(4, "part.updated", textPart("prt_1", "x", { end: true }))).status, "repeat");

    const two = log.offerEvent(event(2, "message.updated", message("msg_2")));
    assert.equal(two.status, "applied");
    assert.deepEqual(two.gap, { after: 2, before: 4 });
    assert.equal(log.lastSeq, 2);

    const three = log.offerEvent(event(3, "part.updated", textPart("prt_1", "")));
    assert.equal(three.status, "applied");
    assert.equal(three.gap, null);
    assert.equal(log.gap, null);
    assert.equal(log.lastSeq, 5);
    // 3, then what was held: 4 and 5, in order.
    assert.deepEqual(three.changes.map((c) => c.type), ["part", "part", "compacted"]);
    assert.equal(textOf(log), "done");
    assert.equal(log.held.size, 0);
  });

  test("held events can be dropped (the page resumes from lastSeq instead)", () => {
    const log = new SessionLog();
    log.offerEvent(event(3, "message.updated", message("msg_1")));
    assert.notEqual(log.gap, null);
    log.dropHeld();
    assert.equal(log.gap, null);
    assert.equal(log.lastSeq, 0);
    assert.equal(log.offerEvent(event(1, "message.updated", message("msg_1"))).status, "applied");
    assert.equal(log.lastSeq, 1); // nothing held jumps in
  });

  test("session and compaction events are reported, context updates are not", () => {
    const log = new SessionLog();
    const created = log.offerEvent(event(1, "session.created", { id: "ses_1", title: "T" }));
    assert.deepEqual(created.changes, [{ type: "session", data: { id: "ses_1", title: "T", updated_at: AT } }]);
    assert.deepEqual(log.offerEvent(event(2, "context.updated", { blocks: [] })).changes, []);
    assert.deepEqual(log.offerEvent(event(3, "session.compacted", {})).changes, [{ type: "compacted" }]);
    assert.equal(log.lastSeq, 3);
  });

  test("a part of a message not loaded is skipped", () => {
    const log = new SessionLog();
    const result = log.offerEvent(event(1, "part.updated", textPart("prt_1", "x", { messageId: "msg_old" })));
    assert.equal(result.status, "applied");
    assert.deepEqual(result.changes, []);
    assert.equal(log.parts.size, 0);
    assert.equal(log.lastSeq, 1);
  });

  test("part and message removal", () => {
    const log = streamingLog("abc");
    log.offerEvent(event(3, "part.updated", textPart("prt_2", "", { end: true })));
    const removedPart = log.offerEvent(event(4, "part.removed", { part_id: "prt_1", message_id: "msg_2" }));
    assert.deepEqual(removedPart.changes.map((c) => [c.type, c.part.part.id]), [["part-removed", "prt_1"]]);
    assert.equal(log.parts.has("prt_1"), false);
    assert.deepEqual([...log.messages.get("msg_2").parts.keys()], ["prt_2"]);
    // A delta for the removed part changes nothing.
    assert.equal(log.applyDelta(delta("prt_1", 3, "d")).status, "ignored");

    const removedMessage = log.offerEvent(event(5, "message.removed", { message_id: "msg_2" }));
    assert.deepEqual(removedMessage.changes.map((c) => [c.type, c.message.info.id]), [["message-removed", "msg_2"]]);
    assert.equal(log.messages.size, 0);
    assert.equal(log.parts.size, 0); // its parts went with it
    // Removing what is not there is not a change.
    assert.deepEqual(log.offerEvent(event(6, "part.removed", { part_id: "prt_9" })).changes, []);
    assert.deepEqual(log.offerEvent(event(7, "message.removed", { message_id: "msg_9" })).changes, []);
    assert.equal(log.lastSeq, 7);
  });
});

// --- order by id -------------------------------------------------------------------------

describe("order", () => {
  test("messages and parts are placed by id, whatever order they arrive in", () => {
    const log = new SessionLog();
    const c = log.offerEvent(event(1, "message.updated", message("msg_c"))).changes[0];
    const a = log.offerEvent(event(2, "message.updated", message("msg_a"))).changes[0];
    const b = log.offerEvent(event(3, "message.updated", message("msg_b"))).changes[0];
    const d = log.offerEvent(event(4, "message.updated", message("msg_d"))).changes[0];
    assert.deepEqual([c.before, a.before, b.before, d.before], [null, "msg_c", "msg_c", null]);
    assert.deepEqual(log.messagesInOrder().map((m) => m.info.id), ["msg_a", "msg_b", "msg_c", "msg_d"]);
    // An update is not a move.
    const again = log.offerEvent(event(5, "message.updated", message("msg_a", "assistant", { finish: "stop" }))).changes[0];
    assert.equal(again.added, false);
    assert.equal(log.messages.get("msg_a").info.finish, "stop");

    const p2 = log.offerEvent(event(6, "part.updated", textPart("prt_2", "", { messageId: "msg_b" }))).changes[0];
    const p1 = log.offerEvent(event(7, "part.updated", textPart("prt_1", "", { messageId: "msg_b" }))).changes[0];
    const p3 = log.offerEvent(event(8, "part.updated", textPart("prt_3", "", { messageId: "msg_b" }))).changes[0];
    assert.deepEqual([p2.before, p1.before, p3.before], [null, "prt_2", null]);
    assert.deepEqual(log.partsInOrder("msg_b").map((r) => r.part.id), ["prt_1", "prt_2", "prt_3"]);
  });

  test("an older page goes before what is loaded and never replaces a live message", () => {
    const log = new SessionLog({ lastSeq: 10 });
    log.addPage([
      { info: message("msg_3", "user"), parts: [{ id: "prt_3", message_id: "msg_3", type: "text", text: "three" }] },
      { info: message("msg_4", "assistant", { completed_at: AT }), parts: [] },
    ]);
    log.offerEvent(event(11, "message.updated", message("msg_5", "user", { agent: "live" })));
    const changes = log.addPage([
      { info: message("msg_1", "user"), parts: [{ id: "prt_1", message_id: "msg_1", type: "text", text: "one" }] },
      { info: message("msg_2", "assistant"), parts: [] },
      { info: message("msg_5", "user", { agent: "stale" }), parts: [] },
    ]);
    assert.deepEqual(
      changes.map((c) => [c.type, c.before]),
      [["message", "msg_3"], ["part", null], ["message", "msg_3"]],
    );
    assert.equal(log.messages.get("msg_5").info.agent, "live");
    assert.deepEqual(log.messagesInOrder().map((m) => m.info.id), ["msg_1", "msg_2", "msg_3", "msg_4", "msg_5"]);
    assert.equal(log.lastSeq, 11); // history does not move the seq
  });

  test("the reply is open while the newest assistant message is not completed", () => {
    const log = new SessionLog();
    assert.equal(log.replyOpen, false);
    log.offerEvent(event(1, "message.updated", message("msg_1", "user")));
    assert.equal(log.replyOpen, false);
    log.offerEvent(event(2, "message.updated", message("msg_2")));
    assert.equal(log.replyOpen, true);
    log.offerEvent(event(3, "message.updated", message("msg_2", "assistant", { completed_at: AT })));
    assert.equal(log.replyOpen, false);
    // An older open assistant message does not count: only the newest.
    log.addPage([{ info: message("msg_0", "assistant"), parts: [] }]);
    assert.equal(log.replyOpen, false);
  });
});

// --- streaming text ------------------------------------------------------------------------

describe("deltas", () => {
  test("a delta at the end of the text is appended", () => {
    const log = streamingLog();
    const first = log.applyDelta(delta("prt_1", 0, "Hello"));
    assert.equal(first.status, "applied");
    assert.deepEqual(first.changes.map((c) => [c.type, c.added, c.part.part.id]), [["part", false, "prt_1"]]);
    assert.equal(log.applyDelta(delta("prt_1", 5, ", world")).status, "applied");
    assert.equal(textOf(log), "Hello, world");
    assert.equal(lenOf(log), 12);
    assert.equal(log.stats.deltasIgnored, 0);
  });

  test("a repeated delta is dropped", () => {
    const log = streamingLog();
    log.applyDelta(delta("prt_1", 0, "abc"));
    const again = log.applyDelta(delta("prt_1", 0, "abc"));
    assert.equal(again.status, "ignored");
    assert.deepEqual(again.changes, []);
    assert.equal(log.applyDelta(delta("prt_1", 1, "b")).status, "ignored");
    assert.equal(log.applyDelta(delta("prt_1", 3, "")).status, "ignored");
    assert.equal(textOf(log), "abc");
    assert.equal(log.stats.deltasIgnored, 3);
  });

  test("an overlapping delta adds only its new tail", () => {
    const log = streamingLog();
    log.applyDelta(delta("prt_1", 0, "abc"));
    assert.equal(log.applyDelta(delta("prt_1", 1, "bcdef")).status, "applied");
    assert.equal(textOf(log), "abcdef");
    assert.equal(lenOf(log), 6);
    assert.equal(log.applyDelta(delta("prt_1", 6, "g")).status, "applied");
    assert.equal(textOf(log), "abcdefg");
  });

  test("a delta past the end is a hole: nothing applied, a snapshot is needed", () => {
    const log = streamingLog();
    log.applyDelta(delta("prt_1", 0, "abc"));
    const hole = log.applyDelta(delta("prt_1", 5, "fg"));
    assert.equal(hole.status, "hole");
    assert.deepEqual(hole.changes, []);
    assert.equal(textOf(log), "abc");
    assert.equal(lenOf(log), 3);
    // Still a hole until a snapshot comes.
    assert.equal(log.applyDelta(delta("prt_1", 7, "h")).status, "hole");
  });

  test("a snapshot replaces the text and later deltas continue from it", () => {
    const log = streamingLog();
    log.applyDelta(delta("prt_1", 0, "abc"));
    assert.equal(log.applyDelta(delta("prt_1", 5, "fg")).status, "hole");
    const snap = log.applySnapshot(snapshot("prt_1", "abcdefg"));
    assert.equal(snap.status, "applied");
    assert.deepEqual(snap.changes.map((c) => c.type), ["part"]);
    assert.equal(textOf(log), "abcdefg");
    assert.equal(lenOf(log), 7);
    // Already covered by the snapshot: dropped; overlapping: trimmed; next: appended.
    assert.equal(log.applyDelta(delta("prt_1", 5, "fg")).status, "ignored");
    assert.equal(log.applyDelta(delta("prt_1", 6, "gh")).status, "applied");
    assert.equal(log.applyDelta(delta("prt_1", 8, "i")).status, "applied");
    assert.equal(textOf(log), "abcdefghi");
  });

  test("a snapshot may also shorten text the page got wrong", () => {
    const log = streamingLog("garbage that is long");
    log.applySnapshot(snapshot("prt_1", "ok"));
    assert.equal(textOf(log), "ok");
    assert.equal(lenOf(log), 2);
    assert.equal(log.applyDelta(delta("prt_1", 2, "!")).status, "applied");
    assert.equal(textOf(log), "ok!");
  });

  test("deltas and snapshots for an unknown part, another field or a finished part change nothing", () => {
    const log = streamingLog("abc");
    assert.equal(log.applyDelta(delta("prt_x", 0, "a")).status, "ignored");
    assert.equal(log.applySnapshot(snapshot("prt_x", "a")).status, "ignored");
    assert.equal(log.applyDelta({ ...delta("prt_1", 3, "d"), field: "other" }).status, "ignored");
    assert.equal(log.applySnapshot({ ...snapshot("prt_1", "zzz"), field: "other" }).status, "ignored");
    assert.equal(log.applyDelta({ ...delta("prt_1", 3, "d"), offset: undefined }).status, "ignored");
    assert.equal(textOf(log), "abc");

    log.offerEvent(event(3, "part.updated", textPart("prt_1", "abc, finished", { end: true })));
    // (at its end, and past it: neither appended nor a hole)
    assert.equal(log.applyDelta(delta("prt_1", 13, "xyz")).status, "ignored");
    assert.equal(log.applyDelta(delta("prt_1", 20, "xyz")).status, "ignored");
    assert.equal(log.applySnapshot(snapshot("prt_1", "abc, finished and more")).status, "ignored");
    assert.equal(textOf(log), "abc, finished");
  });

  test("the finished part's event overrides the streamed text", () => {
    const log = streamingLog();
    log.applyDelta(delta("prt_1", 0, "streamed text with trailing space  "));
    log.offerEvent(event(3, "part.updated", textPart("prt_1", "The final text", { end: true })));
    assert.equal(textOf(log), "The final text");
    assert.equal(lenOf(log), 14);
    assert.equal(isStreaming(log.parts.get("prt_1").part), false);
  });

  test("a streaming part's event never takes back text that deltas brought", () => {
    const log = streamingLog();
    log.applyDelta(delta("prt_1", 0, "Hello, world"));
    // The start event again (e.g. refetched to fill a gap): a prefix of what is known.
    log.offerEvent(event(3, "part.updated", textPart("prt_1", "Hello")));
    assert.equal(textOf(log), "Hello, world");
    assert.equal(lenOf(log), 12);
    log.applyDelta(delta("prt_1", 12, "!"));
    assert.equal(textOf(log), "Hello, world!");
    // Text that does not extend the event's is replaced by it.
    log.offerEvent(event(4, "part.updated", textPart("prt_1", "Goodbye")));
    assert.equal(textOf(log), "Goodbye");
    assert.equal(lenOf(log), 7);
  });

  test("offsets count code points: emoji and other astral characters", () => {
    const log = streamingLog();
    assert.equal(log.applyDelta(delta("prt_1", 0, "a😀")).status, "applied");
    assert.equal(lenOf(log), 2); // two code points, three UTF-16 units
    assert.equal(textOf(log).length, 3);
    // The next delta starts at code point 2, not at UTF-16 index 3.
    assert.equal(log.applyDelta(delta("prt_1", 2, "b")).status, "applied");
    assert.equal(textOf(log), "a😀b");
    // Counted in UTF-16 units it would be a hole; in code points it is a repeat.
    assert.equal(log.applyDelta(delta("prt_1", 1, "😀b")).status, "ignored");
    // Overlap across an emoji: trimmed by code points, the pair kept whole.
    assert.equal(log.applyDelta(delta("prt_1", 2, "b🎉c")).status, "applied");
    assert.equal(textOf(log), "a😀b🎉c");
    assert.equal(lenOf(log), 5);
    assert.equal(log.applyDelta(delta("prt_1", 4, "c👍🏽")).status, "applied");
    assert.equal(textOf(log), "a😀b🎉c👍🏽");
    assert.equal(lenOf(log), 7);
    assert.equal(log.applyDelta(delta("prt_1", 8, "x")).status, "hole");
  });

  test("snapshots and events measure astral text in code points too", () => {
    const log = streamingLog("😀😀");
    assert.equal(lenOf(log), 2);
    assert.equal(log.applyDelta(delta("prt_1", 2, "!")).status, "applied");
    assert.equal(textOf(log), "😀😀!");
    log.applySnapshot(snapshot("prt_1", "𝒳𝒴𝒵"));
    assert.equal(lenOf(log), 3);
    assert.equal(log.applyDelta(delta("prt_1", 2, "𝒵𝒲")).status, "applied");
    assert.equal(textOf(log), "𝒳𝒴𝒵𝒲");
  });
});

describe("a prompt whose ack was lost", () => {
  test("is found in the log when a newer user message holds its text", () => {
    const log = new SessionLog();
    log.offerEvent(event(1, "message.updated", message("msg_1", "user")));
    log.offerEvent(event(2, "part.updated", textPart("prt_1", "hello", { messageId: "msg_1" })));
    const after = log.newestMessageId;
    assert.equal(after, "msg_1");
    assert.equal(log.hasPromptAfter(after, "hello"), false); // older than the send
    log.offerEvent(event(3, "message.updated", message("msg_3", "user")));
    assert.equal(log.hasPromptAfter(after, "again"), false);
    log.offerEvent(event(4, "part.updated", textPart("prt_3", "again", { messageId: "msg_3" })));
    assert.equal(log.hasPromptAfter(after, "again"), true);
    assert.equal(log.hasPromptAfter("", "hello"), true); // sent into an empty session
    log.offerEvent(event(5, "message.updated", message("msg_5")));
    log.offerEvent(event(6, "part.updated", textPart("prt_5", "echo", { messageId: "msg_5" })));
    assert.equal(log.hasPromptAfter(after, "echo"), false); // the assistant's, not a prompt
  });
});
