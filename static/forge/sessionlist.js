// The session list's drawing: one <li> per session, newest first, the open one marked,
// a busy one with its dot. No state of its own (chat.js keeps the sessions).

import { el, formatTime } from "./dom.js";

// A session whose reply runs: a dot to the eye, "working" to a screen reader (QA: it
// read the link as "… black circle 11:16 PM").
function busyDot() {
  return el(
    "span",
    { className: "busy-dot", title: "working" },
    el("span", { "aria-hidden": "true", text: "●" }),
    el("span", { className: "visually-hidden", text: "working, " }),
  );
}

function newestFirst(a, b) {
  if (a.updated_at === b.updated_at) return a.id < b.id ? 1 : -1;
  return a.updated_at < b.updated_at ? 1 : -1;
}

// Draw `sessions` (an iterable of the API's sessions) into `list`; `current` is the open
// session's id, `onClick(event, id)` a click on one. The list is drawn anew on every
// message event of a streaming reply: the session the keyboard was on gets the focus
// back (QA: it fell to the page's body).
export function drawSessions(list, sessions, { current, onClick }) {
  const sorted = [...sessions].sort(newestFirst);
  const focused = list.contains(document.activeElement) ? document.activeElement.dataset?.sessionId : null;
  list.replaceChildren(
    ...sorted.map((session) =>
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
            onclick: (event) => onClick(event, session.id),
          },
          el("span", { className: "session-title", dir: "auto", text: session.title || "Untitled" }),
          el("span", { className: "session-meta" }, session.status === "busy" ? busyDot() : null, formatTime(session.updated_at)),
        ),
      ),
    ),
  );
  if (focused) focusSession(list, focused);
  return sorted.length;
}

// Give the keyboard to session `id`'s item in `list`, if it is drawn.
export function focusSession(list, id) {
  for (const item of list.querySelectorAll(".session-item")) {
    if (item.dataset.sessionId === id) item.focus();
  }
}
