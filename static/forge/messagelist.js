// The message list of the open session: the session log's changes (see
// sessionlog.js) drawn as elements. Messages and parts are placed in id order;
// a part's drawing waits for the next animation frame (a stream of deltas draws
// once per frame), except when its message finishes. The list stays scrolled to
// the bottom when it was there; scrolled up from it, a "Latest" button goes back.

import { el, insertBefore } from "./dom.js";
import { messageView, partView, renderMessage, renderPart } from "./render.js";

export class MessageList {
  // log: the SessionLog drawn; actions: for the renderers (openSession(id)).
  constructor(listEl, scroller, log, actions) {
    this.listEl = listEl;
    this.scroller = scroller;
    this.log = log;
    this.actions = actions;
    this.messageViews = new Map(); // message id -> {el, headEl, partsEl, footEl}
    this.partViews = new Map(); // part id -> {el, ...}
    this.dirty = new Set(); // part ids to draw at the next frame
    this.renderScheduled = false;
    this.jump = document.getElementById("jump-latest");
    if (this.jump) {
      this.jump.addEventListener("click", () => this.scrollToBottom());
      scroller.addEventListener("scroll", () => this.showJump(), { passive: true });
    }
  }

  clear() {
    this.listEl.replaceChildren();
    this.showJump();
  }

  draw(changes) {
    for (const change of changes) {
      switch (change.type) {
        case "message":
          this.drawMessage(change);
          break;
        case "message-removed":
          this.messageViews.get(change.message.info.id)?.el.remove();
          this.messageViews.delete(change.message.info.id);
          for (const id of change.message.parts.keys()) this.partViews.delete(id);
          break;
        case "part":
          this.drawPart(change);
          break;
        case "part-removed":
          this.partViews.get(change.part.part.id)?.el.remove();
          this.partViews.delete(change.part.part.id);
          break;
        case "compacted":
          this.notice("The conversation was compacted.");
          break;
        default:
          break; // not about the list
      }
    }
  }

  drawMessage({ message, added, before }) {
    const info = message.info;
    let view = this.messageViews.get(info.id);
    if (added || !view) {
      view = messageView(info);
      this.messageViews.set(info.id, view);
      this.stickToBottom(() => insertBefore(this.listEl, view.el, this.messageViews.get(before)?.el));
    }
    // A finished message shows its parts as they finished, never a frame behind.
    if (info.completed_at) this.flush();
    renderMessage(view, info);
  }

  drawPart({ part: rec, added, before }) {
    const id = rec.part.id;
    if (added || !this.partViews.has(id)) {
      const view = partView(rec.part);
      this.partViews.set(id, view);
      const message = this.messageViews.get(rec.part.message_id);
      if (message) insertBefore(message.partsEl, view.el, this.partViews.get(before)?.el);
    }
    this.scheduleRender(id);
  }

  scheduleRender(id) {
    this.dirty.add(id);
    if (this.renderScheduled) return;
    this.renderScheduled = true;
    requestAnimationFrame(() => this.flush());
  }

  // Draw the parts that changed, now.
  flush() {
    this.renderScheduled = false;
    if (this.dirty.size === 0) return;
    const dirty = [...this.dirty];
    this.dirty.clear();
    this.stickToBottom(() => {
      for (const id of dirty) {
        const rec = this.log.parts.get(id);
        const view = this.partViews.get(id);
        if (rec && view) renderPart(view, rec.part, rec.message.info.role, this.actions, Boolean(rec.message.info.summary));
      }
    });
  }

  notice(text) {
    this.listEl.append(el("div", { className: "notice", role: "status", text }));
  }

  // --- scrolling ---

  atBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  // The "Latest" button: shown while what is below the view is not in it.
  showJump() {
    if (this.jump) this.jump.hidden = this.atBottom();
  }

  stickToBottom(change) {
    const atBottom = this.atBottom();
    change();
    if (atBottom) this.scroller.scrollTop = this.scroller.scrollHeight;
    this.showJump();
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.showJump();
  }

  // Add above what is shown without moving it (older history).
  keepPosition(change) {
    const before = this.scroller.scrollHeight;
    const top = this.scroller.scrollTop;
    change();
    this.scroller.scrollTop = top + (this.scroller.scrollHeight - before);
    this.showJump();
  }
}
