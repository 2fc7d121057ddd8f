// The chat page's approval state (static/forge/approval.js) and the log's view of a
// suspended reply, without a browser: node --test tests/js/

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { answerBody, approvalState, awaitingCalls, isAwaiting, MAX_REASON } from "../../static/forge/approval.js";
import { SessionLog } from "../../static/forge/sessionlog.js";

const AT = "2025-01-01T00:00:00.000Z";
const BEFORE = Date.parse(AT) - 1000; // a moment before the calls' expiry

function tool(status, state = {}, callId = "call_1") {
  return {
    id: `prt_${callId}`,
    message_id: "msg_2",
    session_id: "ses_1",
    type: "tool",
    call_id: callId,
    tool: "write_file",
    state: { status, input: { path: "a.txt" }, ...state },
  };
}

const awaiting = tool("awaiting-approval", { time: { start: AT }, metadata: { approval: { expires_at: AT } } });
const approved = { approved: true, reason: "", at: AT, by: 1 };

describe("approvalState", () => {
  test("a waiting call asks, with its expiry", () => {
    const state = approvalState(awaiting, undefined, BEFORE);
    assert.equal(state.asking, true);
    assert.equal(state.sending, false);
    assert.equal(state.expiresAt, AT);
    assert.equal(state.label, "Waiting for your approval");
    assert.equal(isAwaiting(awaiting), true);
  });

  test("a call past its expiry asks no more, and says it will be denied", () => {
    // QA: the card offered Allow and Deny until the server's sweep, and a click got a 409.
    const expired = approvalState(awaiting, undefined, Date.parse(AT));
    assert.deepEqual([expired.asking, expired.expired, expired.label], [false, true, "Expired: the call will be denied"]);
    // An answer already on its way is not taken back: the server says how it went.
    const sending = approvalState(awaiting, { approve: true }, Date.parse(AT) + 1);
    assert.deepEqual([sending.sending, sending.expired], [true, false]);
  });

  test("an answer in flight stops asking; a failed one asks again with the error", () => {
    const sending = approvalState(awaiting, { approve: false }, BEFORE);
    assert.deepEqual([sending.asking, sending.sending, sending.label], [false, true, "Denying…"]);
    const failed = approvalState(awaiting, { approve: true, error: "already answered" }, BEFORE);
    assert.deepEqual([failed.asking, failed.sending, failed.error], [true, false, "already answered"]);
  });

  test("the card follows the part: running and completed show allowed, denied shows the reason", () => {
    const running = approvalState(tool("running", { metadata: { approval: approved } }), { approve: true });
    assert.deepEqual([running.asking, running.sending, running.outcome, running.label], [false, false, "approved", "Allowed"]);
    const done = approvalState(tool("completed", { output: "ok", metadata: { approval: { ...approved, reason: "fine" } } }));
    assert.equal(done.label, "Allowed: fine");
    const denied = approvalState(tool("error", { error: "not that file", metadata: { denied: true } }));
    assert.deepEqual([denied.outcome, denied.reason, denied.label], ["denied", "not that file", "Denied: not that file"]);
    const plain = approvalState(tool("completed", { output: "ok" }));
    assert.deepEqual([plain.asking, plain.outcome, plain.label], [false, null, ""]);
    assert.equal(isAwaiting(tool("running")), false);
  });
});

describe("answerBody", () => {
  test("approve alone, or with a trimmed reason capped at the server's limit", () => {
    assert.deepEqual(answerBody(true), { approve: true });
    assert.deepEqual(answerBody(false, "  "), { approve: false });
    assert.deepEqual(answerBody(false, " not that file \n"), { approve: false, reason: "not that file" });
    assert.equal(answerBody(false, "x".repeat(MAX_REASON + 5)).reason.length, MAX_REASON);
  });
});

describe("SessionLog.replyAwaiting", () => {
  const event = (seq, type, data) => ({ seq, id: `evt_${seq}`, session_id: "ses_1", type, at: AT, data });
  const reply = { id: "msg_2", session_id: "ses_1", role: "assistant", created_at: AT };

  test("an open reply with a waiting call awaits; once answered it is open and running", () => {
    const log = new SessionLog();
    log.offerEvent(event(1, "message.updated", reply));
    log.offerEvent(event(2, "part.updated", tool("pending")));
    assert.deepEqual([log.replyOpen, log.replyAwaiting], [true, false]);
    log.offerEvent(event(3, "part.updated", awaiting));
    assert.deepEqual([log.replyOpen, log.replyAwaiting], [true, true]);
    assert.deepEqual(awaitingCalls(log.partsInOrder("msg_2").map((rec) => rec.part)), ["call_1"]);
    log.offerEvent(event(4, "part.updated", tool("running", { metadata: { approval: approved } })));
    assert.deepEqual([log.replyOpen, log.replyAwaiting], [true, false]);
    log.offerEvent(event(5, "message.updated", { ...reply, completed_at: AT }));
    assert.deepEqual([log.replyOpen, log.replyAwaiting], [false, false]);
  });
});
