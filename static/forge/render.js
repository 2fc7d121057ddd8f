// Drawing messages and their parts. Each message and part has a view: its element
// and whatever the drawing keeps between renders (a details element the user
// opened stays open). Model text goes into the page as HTML only through
// markdown.js, which escapes everything first; everything else uses textContent.

import { answerBody, approvalState } from "./approval.js";
import { el, formatCost, formatMoment, formatTime, formatTokens, pretty, safeHref } from "./dom.js";
import { MarkdownStream } from "./mdstream.js";
import { isStreaming } from "./sessionlog.js";

// --- messages ---

export function messageView(info) {
  const view = {
    el: el("article", { className: `message message-${info.role}`, dataset: { messageId: info.id, role: info.role } }),
    headEl: el("header", { className: "message-head" }),
    partsEl: el("div", { className: "message-parts" }),
    footEl: el("footer", { className: "message-foot" }),
  };
  view.el.append(view.headEl, view.partsEl, view.footEl);
  return view;
}

export function renderMessage(view, info) {
  const assistant = info.role === "assistant";
  const open = assistant && !info.completed_at;
  view.el.dataset.state = info.error ? "error" : open ? "streaming" : "done";
  view.el.classList.toggle("message-summary", Boolean(info.summary));
  view.el.setAttribute("aria-busy", open ? "true" : "false");
  const head = [el("span", { className: "role", text: assistant ? "Assistant" : info.role === "user" ? "You" : info.role })];
  if (info.agent) head.push(el("span", { className: "agent", text: info.agent }));
  if (assistant && info.model?.model) {
    head.push(el("span", { className: "model", text: `${info.model.provider}/${info.model.model}` }));
  }
  if (info.created_at) {
    head.push(el("time", { datetime: info.created_at, title: info.created_at, text: formatTime(info.created_at) }));
  }
  if (open) head.push(el("span", { className: "working", text: "working…" }));
  view.headEl.replaceChildren(...head);

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
  view.footEl.replaceChildren(...foot);
  view.footEl.hidden = foot.length === 0;
}

// --- parts ---

export function partView(part) {
  return { el: el("div", { className: `part part-${part.type}`, dataset: { partId: part.id, type: part.type } }) };
}

// Draw `part` of a message by `role` into its view. actions.openSession(id) opens
// another session (a subtask's); actions.answerApproval(callId, {approve, reason?})
// answers a tool call awaiting approval (a promise that rejects with an Error).
// `summary`: the message is a compaction's summary.
export function renderPart(view, part, role, actions, summary = false) {
  view.el.dataset.streaming = isStreaming(part) ? "true" : "false";
  switch (part.type) {
    case "text":
      return renderText(view, part, role, summary);
    case "reasoning":
      return renderReasoning(view, part);
    case "tool":
      return renderTool(view, part, actions);
    case "step-start":
      view.el.hidden = true;
      return;
    case "step-finish":
      return view.el.replaceChildren(
        el("span", { className: "step-label", text: "step" }),
        el("span", { text: part.reason ? `finish: ${part.reason}` : "" }),
        el("span", { className: "step-tokens", text: formatTokens(part.tokens) }),
        el("span", { className: "step-cost", text: `cost: ${formatCost(part.cost)}` }),
      );
    case "patch":
      return renderPatch(view, part);
    case "file":
      return renderFile(view, part);
    case "agent":
      return view.el.replaceChildren(el("span", { className: "badge", text: `@${part.name}` }));
    case "subtask":
      return renderSubtask(view, part, actions);
    case "compaction":
      // A divider: what lies above was summarized for the model (it stays here, readable).
      return view.el.replaceChildren(
        el(
          "div",
          { className: "compaction-divider", role: "separator" },
          el("span", { text: part.auto ? "Earlier messages summarized (automatically)" : "Earlier messages summarized" }),
        ),
      );
    default:
      return view.el.replaceChildren(el("span", { className: "muted", text: `[${part.type}]` }));
  }
}

// The file name of a text the runtime framed as `<file name="…">` (HTML-escaped), or "".
function attachedName(text) {
  const match = /^<file name="([^"]*)"/.exec(text);
  if (!match) return "";
  const entities = { "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#x27;": "'" };
  return match[1].replace(/&(amp|lt|gt|quot|#x27);/g, (entity) => entities[entity]);
}

function renderText(view, part, role, summary) {
  const text = part.text ?? "";
  if (part.synthetic) {
    // Text the runtime added (e.g. an attached file's content): shown folded, as text,
    // named by its file (QA: three files' folds all said "Attached text").
    const name = attachedName(text);
    const title = name ? `Attached text: ${name}` : "Attached text";
    view.el.replaceChildren(
      el("details", { className: "synthetic" }, el("summary", { text: title }), el("pre", { text })),
    );
    return;
  }
  if (role === "assistant") {
    if (!view.body) {
      view.body = el("div", { className: "markdown" });
      view.el.replaceChildren(
        summary
          ? // The summary the model continues from: folded, expandable.
            el("details", { className: "compaction-summary" }, el("summary", { text: "Summary of the earlier messages" }), view.body)
          : view.body,
      );
    }
    drawMarkdown(view, text);
    return;
  }
  view.el.replaceChildren(el("div", { className: "plain-text", text }));
}

function renderReasoning(view, part) {
  const streaming = isStreaming(part);
  if (!view.details) {
    view.summary = el("summary");
    view.body = el("div", { className: "markdown reasoning-body" });
    view.details = el("details", { className: "reasoning" }, view.summary, view.body);
    view.details.open = streaming;
    view.summary.addEventListener("click", () => {
      view.toggled = true;
    });
    view.el.replaceChildren(view.details);
  }
  view.summary.textContent = streaming ? "Reasoning…" : "Reasoning";
  // Finished reasoning folds away, unless the reader opened or closed it.
  if (!streaming && !view.toggled && view.wasStreaming) view.details.open = false;
  view.wasStreaming = streaming;
  drawMarkdown(view, part.text ?? "");
}

// Model text as Markdown into view.body, which holds nothing else. As the text grows,
// the nodes of its finished blocks stay (a selection in them too) and only the blocks
// after them are replaced: each frame costs what changed, not the whole reply. The
// body ends as body.innerHTML = renderMarkdown(text) would leave it.
function drawMarkdown(view, text) {
  const md = (view.md ??= { stream: new MarkdownStream(), count: 0, open: [], openHtml: "" });
  const { reset, finished, open } = md.stream.update(text);
  if (reset) {
    view.body.replaceChildren();
    Object.assign(md, { count: 0, open: [], openHtml: "" });
  }
  if (finished.length === 0 && open === md.openHtml) return;
  // The HTML is markdown.js's, escaped first, by construction; a template parses it inert.
  const nodes = (html) => {
    const template = document.createElement("template");
    template.innerHTML = html;
    const list = [...template.content.childNodes];
    if (md.count > 0) list.unshift(document.createTextNode("\n")); // blocks are joined by "\n"
    return list;
  };
  finished.forEach((html, n) => {
    // The first block to finish is often the open one as drawn: its nodes stay.
    if (n === 0 && md.open.length > 0 && html === md.openHtml) {
      md.open = [];
    } else {
      if (n === 0) for (const node of md.open.splice(0)) node.remove();
      view.body.append(...nodes(html));
    }
    md.count += 1;
  });
  for (const node of md.open.splice(0)) node.remove();
  md.open = open ? nodes(open) : [];
  md.openHtml = open;
  view.body.append(...md.open);
}

function renderTool(view, part, actions) {
  view.part = part;
  const state = part.state || { status: "pending" };
  const status = state.status || "pending";
  view.el.dataset.status = status;
  view.open = view.open || { input: false, output: true };
  const section = (name, label, value) => {
    const details = el("details", { className: `tool-${name}` }, el("summary", { text: label }), el("pre", { text: pretty(value) }));
    details.open = view.open[name];
    details.addEventListener("toggle", () => {
      view.open[name] = details.open;
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
  const approval = approvalState(part, view.answer);
  clearTimeout(view.expiryTimer);
  if (approval.asking && approval.expiresAt) {
    // Drawn again when the call expires (a timer holds at most 2^31 - 1 ms).
    const wait = Date.parse(approval.expiresAt) - Date.now() + 100;
    if (wait > 0 && wait < 2 ** 31 - 1) view.expiryTimer = setTimeout(() => renderTool(view, view.part, actions), wait);
  }
  if (approval.asking || approval.sending) view.open.input = true; // what is being allowed
  if (state.input !== undefined && status !== "pending") children.push(section("input", "Input", state.input));
  if (approval.asking || approval.sending) children.push(approvalForm(view, part, approval, actions));
  else if (approval.expired) {
    children.push(el("div", { className: "approval-outcome approval-expired", role: "status", text: approval.label }));
  } else if (approval.outcome) {
    children.push(el("div", { className: `approval-outcome approval-${approval.outcome}`, text: approval.label }));
  }
  if (status === "completed") children.push(section("output", "Output", state.output));
  if (status === "error") {
    children.push(el("div", { className: "tool-error", text: `Error: ${pretty(state.error)}` }));
    if (state.metadata?.interrupted) children.push(el("div", { className: "muted", text: "interrupted" }));
  }
  view.el.replaceChildren(el("div", { className: "tool-card" }, ...children));
}

// Allow / Deny (with an optional reason) for a call awaiting approval. The answer
// goes to the server; the card then follows the part's next states from the log.
function approvalForm(view, part, approval, actions) {
  if (!view.reasonEl) {
    view.reasonEl = el("input", { type: "text", className: "approval-reason", maxlength: "2000", autocomplete: "off" });
    // Enter in the reason box denies with that reason (it did nothing).
    view.reasonEl.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.isComposing && view.denyOnEnter) {
        event.preventDefault();
        view.denyOnEnter();
      }
    });
  }
  const answer = (approve) => {
    const body = answerBody(approve, approve ? "" : view.reasonEl.value);
    view.answer = { approve };
    renderTool(view, view.part, actions);
    Promise.resolve()
      .then(() => actions.answerApproval(part.call_id, body))
      .catch((error) => {
        view.answer = { approve, error: error?.message || "the answer was not sent" };
        renderTool(view, view.part, actions);
      });
  };
  const disabled = approval.sending;
  view.denyOnEnter = disabled ? null : () => answer(false);
  return el(
    "div",
    { className: "approval", role: "group", "aria-label": `Approve the call to ${part.tool}` },
    el("div", { className: "approval-label", role: "status", text: approval.label }),
    approval.expiresAt ? el("div", { className: "muted", text: `Expires ${formatMoment(approval.expiresAt)}` }) : null,
    approval.error ? el("div", { className: "tool-error", role: "alert", text: `Not sent: ${approval.error}` }) : null,
    el(
      "div",
      { className: "approval-actions" },
      el("button", { type: "button", className: "primary small approval-allow", text: "Allow", disabled, onclick: () => answer(true) }),
      el("label", { className: "approval-reason-label" }, "Reason to deny (optional) ", view.reasonEl),
      el("button", { type: "button", className: "danger small approval-deny", text: "Deny", disabled, onclick: () => answer(false) }),
    ),
  );
}

function renderPatch(view, part) {
  const files = Array.isArray(part.files) ? part.files : [];
  view.el.replaceChildren(
    el(
      "div",
      { className: "patch" },
      el("span", { className: "patch-label", text: `Changed ${files.length} file${files.length === 1 ? "" : "s"}` }),
      el("ul", {}, files.map((file) => el("li", {}, el("code", { text: String(file) })))),
      part.hash ? el("span", { className: "muted", text: `snapshot ${String(part.hash).slice(0, 12)}` }) : null,
    ),
  );
}

function renderFile(view, part) {
  const name = part.filename || "file";
  const href = safeHref(part.url);
  const label = `${name}${part.mime ? ` (${part.mime})` : ""}`;
  view.el.replaceChildren(
    el(
      "div",
      { className: "file" },
      "📎 ",
      href ? el("a", { href, rel: "noopener noreferrer", target: "_blank", text: label }) : el("span", { text: label }),
    ),
  );
}

function renderSubtask(view, part, actions) {
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
        onclick: () => actions.openSession(part.child_session_id),
      }),
    );
  }
  view.el.replaceChildren(el("div", { className: "subtask" }, ...children));
}
