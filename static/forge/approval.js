// Tool approvals on the chat page, as pure state (no DOM): what a tool card shows
// about an approval, and what answering sends. render.js draws it; view.js sends it
// (POST /api/sessions/{id}/approvals/{call_id}/). Tests: node --test tests/js/

export const AWAITING = "awaiting-approval";
export const MAX_REASON = 2000; // the server's limit (forge.runtime.approvals)

// A tool part waits for the user's answer.
export function isAwaiting(part) {
  return part?.type === "tool" && part.state?.status === AWAITING;
}

// What the card shows about its approval:
//   {asking, sending, expired, error, expiresAt, outcome: null | "approved" | "denied", reason, label}
// `answer`: the user's answer in flight for this call ({approve, error?}) or undefined.
// `now`: the time (ms) to judge the expiry by. A call past its expiry asks no more:
// the server denies it at its next sweep, and an answer meanwhile is refused (QA: the
// card offered Allow and Deny until then, and a click got a 409 the page did not show).
// The part's own state wins: once the log moves the call on, the card follows it.
export function approvalState(part, answer, now = Date.now()) {
  const state = part?.state || {};
  const metadata = state.metadata || {};
  const approval = metadata.approval || {};
  if (state.status === AWAITING) {
    const sending = Boolean(answer && !answer.error);
    const expiresAt = approval.expires_at || null;
    const expired = !sending && expiresAt !== null && Date.parse(expiresAt) <= now;
    let label = "Waiting for your approval";
    if (sending) label = answer.approve ? "Allowing…" : "Denying…";
    else if (expired) label = "Expired: the call will be denied";
    return {
      asking: !sending && !expired,
      sending,
      expired,
      error: answer?.error || null,
      expiresAt,
      outcome: null,
      reason: "",
      label,
    };
  }
  const base = { asking: false, sending: false, expired: false, error: null, expiresAt: null };
  if (metadata.denied) {
    const reason = approval.reason || (typeof state.error === "string" ? state.error : "");
    return { ...base, outcome: "denied", reason, label: reason ? `Denied: ${reason}` : "Denied" };
  }
  if (approval.approved === true) {
    const reason = approval.reason || "";
    return { ...base, outcome: "approved", reason, label: reason ? `Allowed: ${reason}` : "Allowed" };
  }
  return { ...base, outcome: null, reason: "", label: "" };
}

// The body of an answer: {approve} and, when given, the reason (trimmed, at most
// MAX_REASON characters). An approval's reason is optional too.
export function answerBody(approve, reason = "") {
  const body = { approve: Boolean(approve) };
  const text = typeof reason === "string" ? reason.trim().slice(0, MAX_REASON) : "";
  if (text) body.reason = text;
  return body;
}

// The newest assistant message waits for approvals (its turn is suspended, not
// running): the composer stays usable, since a new prompt denies what waits.
export function awaitingCalls(parts) {
  return parts.filter(isAwaiting).map((part) => part.call_id);
}
