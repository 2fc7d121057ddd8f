// The Forge chat page: sessions on the left, the open conversation on the right.
//
// This module wires the page together: the session list, the header (rename,
// delete), the error banner, the connection indicator and the #/s/<id> route.
// The rest lives in modules by job:
//   api.js         the HTTP API (CSRF, JSON errors, paging)
//   socket.js      the session's WebSocket (backoff, resume after a seq)
//   sessionlog.js  messages and parts from events, deltas and snapshots (no DOM)
//   view.js        one open session: frames in, the log's changes drawn
//   render.js      messages and parts as elements (markdown.js for model text)
//   composer.js    the prompt box, Send and Abort
//   sessionlist.js the session list's drawing
//
// The first screen (no session open) is a new chat, ready to type: the prompt box
// has focus, and the first message creates the session and is sent to it. On a
// small screen the session list collapses behind the "Chats" button.

import { Api } from "./api.js";
import { Composer } from "./composer.js";
import { $ } from "./dom.js";
import { drawSessions, focusSession } from "./sessionlist.js";
import { SessionView } from "./view.js";

const root = document.getElementById("app");
const NARROW = window.matchMedia("(max-width: 720px)");
const CONNECTION_LABELS = {
  idle: "Not connected",
  connecting: "Connecting…",
  reconnecting: "Reconnecting…",
  open: "Live",
  failed: "Disconnected",
};

const GONE = "This conversation was deleted.";
// A link to a session that is not there (a typo, another user's): it may never have been.
const NO_SUCH = "There is no such conversation here: it was deleted, or the link is not yours.";
const DRAFT_KEY = "forge.draft";

class Chat {
  constructor() {
    this.api = new Api({ base: root.dataset.api, loginUrl: root.dataset.loginUrl });
    this.wsPath = root.dataset.wsPath;
    this.composer = new Composer(() => this.view, (text, files) => this.startChat(text, files), {
      maxBytes: Number(root.dataset.maxPromptBytes) || 0,
      maxFiles: Number(root.dataset.maxFiles) || 0,
      maxFileBytes: Number(root.dataset.maxFileBytes) || 0,
      showError: (message) => this.showError(message),
      hideError: () => this.hideError(),
    });
    this.sessions = new Map();
    this.sessionsNext = null;
    this.loadedMore = false;
    this.view = null;
    this.opening = null; // the session being opened, until its view exists
    this.refreshTimer = null;
    this.errorTimer = null;
    this.starting = false; // the first screen's first message is creating its session
    this.discarded = new Set(); // sessions deleted here (Delete, or a refused first message)
  }

  start() {
    this.api.beforeLogin = () => this.keepDraft();
    this.restoreDraft();
    $("new-session").addEventListener("click", () => this.createSession());
    $("sidebar-toggle").addEventListener("click", () => this.toggleSidebar());
    NARROW.addEventListener("change", () => this.showSidebar(!NARROW.matches));
    this.showSidebar(!NARROW.matches);
    $("more-sessions").addEventListener("click", () => this.loadMoreSessions());
    $("load-older").addEventListener("click", () => this.view?.loadOlder());
    this.composer.start();
    $("rename-button").addEventListener("click", () => this.startRename());
    $("rename-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.finishRename();
    });
    $("rename-cancel").addEventListener("click", () => this.cancelRename());
    $("rename-input").addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        this.cancelRename();
      }
    });
    $("delete-button").addEventListener("click", () => this.deleteSession());
    // Dismissed, the banner hides its button: the keyboard goes back to the prompt box
    // (QA: the focus fell to the page's body).
    $("error-close").addEventListener("click", () => {
      this.hideError();
      this.composer.focus();
    });
    window.addEventListener("hashchange", () => this.followHash());
    window.addEventListener("popstate", () => this.followHash()); // pushState's entries
    window.addEventListener("online", () => this.view?.reconnectNow());
    window.addEventListener("focus", () => this.refreshSessionsSoon());
    this.showConversation(false);
    this.composer.focus();
    this.loadSessions().then(() => this.followHash());
  }

  // --- the sidebar (collapsible; collapsed at first on a small screen) ---

  showSidebar(open) {
    root.dataset.sidebar = open ? "open" : "closed";
    $("sidebar-toggle").setAttribute("aria-expanded", open ? "true" : "false");
  }

  toggleSidebar() {
    this.showSidebar(root.dataset.sidebar !== "open");
  }

  // --- sessions ---

  async loadSessions() {
    try {
      const page = await this.api.listSessions();
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
    const button = $("more-sessions");
    try {
      const page = await this.api.next(this.sessionsNext);
      this.loadedMore = true;
      for (const session of page.results) this.sessions.set(session.id, session);
      this.sessionsNext = page.next;
      const focused = document.activeElement === button;
      this.renderSessions();
      // The last page hides the button: the keyboard goes on to the first session it
      // brought (QA: the focus fell to the page's body, back at its top).
      if (focused && button.hidden && page.results.length) focusSession($("session-list"), page.results[0].id);
    } catch (error) {
      this.showError(`Could not list sessions: ${error.message}`);
    }
  }

  refreshSessionsSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.loadSessions(), 300);
  }

  renderSessions() {
    const count = drawSessions($("session-list"), this.sessions.values(), {
      current: this.view?.id,
      onClick: (event, id) => this.clickSession(event, id),
    });
    $("sessions-empty").hidden = count > 0;
    $("more-sessions").hidden = !this.sessionsNext;
  }

  // Leaving for the login page (a 401: signed out in another tab, the login expired):
  // the prompt box's text, or the prompt just sent and refused, is kept for the page
  // that signing in again opens (QA: the box had been cleared, and the text was lost).
  // It is the user's: kept with their name, and given back to them only (QA: whoever
  // signed in next in that tab found it in their box, ready to send).
  keepDraft() {
    const view = this.view;
    const pending = view ? [...view.pending.values(), ...view.unconfirmed].map((prompt) => prompt.text) : [];
    const draft = this.composer.prompt.value || pending[0] || this.composer.lastSent || "";
    try {
      if (draft) sessionStorage.setItem(DRAFT_KEY, JSON.stringify({ user: root.dataset.user, text: draft }));
    } catch {
      // storage refused (private mode, quota): nothing more to do
    }
  }

  restoreDraft() {
    let draft = null;
    try {
      const kept = sessionStorage.getItem(DRAFT_KEY);
      sessionStorage.removeItem(DRAFT_KEY);
      const saved = kept ? JSON.parse(kept) : null;
      if (saved?.user === root.dataset.user && typeof saved.text === "string") draft = saved.text;
    } catch {
      return; // storage refused, or not a draft of this page's
    }
    if (draft && this.composer.prompt.value === "") this.composer.prompt.value = draft;
  }

  // A plain click opens the session at once (the hashchange it also causes then
  // finds it open), so the page has switched by the time the click returns.
  clickSession(event, id) {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    if (NARROW.matches) this.showSidebar(false); // the chosen chat gets the screen
    this.open(id);
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

  // The open session's view says whether a turn runs (see SessionView.updateBusy).
  showBusy(id, state) {
    this.composer.show(state);
    // Deleting a session that runs a turn is refused (409): not offered then (QA: the
    // confirmation was accepted, then refused).
    $("delete-button").disabled = state.busy || state.waiting;
    root.dataset.busy = state.busy ? "true" : "false";
    this.setSessionBusy(id, state.busy);
  }

  async createSession() {
    try {
      const session = await this.api.createSession();
      this.sessions.set(session.id, session);
      this.renderSessions();
      if (NARROW.matches) this.showSidebar(false);
      this.select(session.id);
    } catch (error) {
      this.showError(`Could not create a session: ${error.message}`);
    }
  }

  // The first screen's first message: a new session, opened, then the prompt sent
  // to it. False (the prompt goes back into the box) when it could not be.
  async startChat(text, files) {
    if (this.starting) return false;
    this.starting = true;
    try {
      let session;
      try {
        session = await this.api.createSession();
      } catch (error) {
        this.showError(`Could not create a session: ${error.message}`);
        return false;
      }
      this.sessions.set(session.id, session);
      this.renderSessions();
      // The route follows without a hashchange: this call opens it, and only this one.
      history.pushState(null, "", `#/s/${encodeURIComponent(session.id)}`);
      await this.open(session.id);
      const view = this.view;
      if (view?.id !== session.id) return false;
      view.startedHere = true; // until its first prompt is taken (view.js: the ack)
      if (view.openFailed) {
        await this.discardUnused(view); // nothing in it: not left in the list
        this.showError("The new chat could not be opened; the message is back in the box. Try again.");
        return false;
      }
      const sent = await view.sendPrompt(text, files);
      if (!sent) await this.discardUnused(view);
      else if (view.pending.size === 0) view.startedHere = false; // taken over HTTP
      return sent;
    } finally {
      this.starting = false;
    }
  }

  // The first screen's first message was refused (a budget, a rate limit): the session
  // made for it holds nothing, so it goes, and the page is the first screen again with
  // the text in the box (QA: an empty "Untitled" session stayed, the page on it).
  async discardUnused(view) {
    if (!view.startedHere || view.log.messages.size > 0) return;
    view.startedHere = false;
    this.discarded.add(view.id); // its socket is closed as deleted: not "deleted elsewhere"
    try {
      await this.api.deleteSession(view.id);
    } catch {
      this.discarded.delete(view.id);
      return; // it stays, empty: nothing lost
    }
    this.sessionGone(view.id);
  }

  // The route: a session's, or (no session in it: Back past a chat's first message)
  // the first screen; the chat stayed on screen, and the next message went to it (QA).
  followHash() {
    const match = location.hash.match(/^#\/s\/([A-Za-z0-9_-]+)$/);
    if (match) this.open(match[1]);
    else if (!location.hash.startsWith("#/s/")) this.toFirstScreen();
  }

  toFirstScreen() {
    this.opening = null; // a session still being opened is not shown
    this.view?.close();
    this.view = null;
    this.stopRename();
    $("message-list").replaceChildren();
    $("load-older").hidden = true;
    this.showConversation(false);
    this.renderSessions(); // none is the current one
  }

  select(id) {
    const hash = `#/s/${encodeURIComponent(id)}`;
    if (location.hash !== hash) location.hash = hash; // hashchange opens it
    else this.open(id);
  }

  async open(id) {
    if (this.view?.id === id && !this.view.closed && !this.view.openFailed) return;
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
        session = await this.api.session(id);
        this.sessions.set(id, session);
      } catch (error) {
        if (this.opening === id) this.opening = null;
        if (error.status === 404) {
          this.sessionGone(id, NO_SUCH);
          // Not left on the bad link (unless another session was chosen meanwhile).
          if (location.hash === `#/s/${encodeURIComponent(id)}`) {
            history.replaceState(null, "", location.pathname);
          }
        }
        else this.showError(`Could not open the session: ${error.message}`);
        return;
      }
    }
    if (this.opening !== id) return; // another session was chosen meanwhile
    this.opening = null;
    this.view = new SessionView(this, session, { api: this.api, wsPath: this.wsPath });
    this.showConversation(true);
    this.renderHeader();
    this.renderSessions();
    await this.view.open();
    this.composer.focus();
  }

  // Open: a session's conversation; else the first screen, a new chat to type into.
  showConversation(open) {
    $("empty-state").hidden = open;
    $("rename-button").hidden = !open;
    $("delete-button").hidden = !open;
    $("delete-button").disabled = false; // until the session's view says it is busy
    $("connection").hidden = !open;
    if (!open) {
      this.setConnection("idle");
      $("session-title").textContent = "New chat";
      document.title = "Forge";
      this.composer.show({ busy: false, waiting: false, retry: null });
    }
  }

  renderHeader() {
    const session = this.view && this.sessions.get(this.view.id);
    const title = session ? session.title || "Untitled" : "New chat";
    $("session-title").textContent = title;
    document.title = `${title} · Forge`; // a tab (and its history entry) says which chat
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

  // Escape or Cancel: the title stays, and the focus goes back to the Rename button
  // (it fell to the page's body).
  cancelRename() {
    this.stopRename();
    if (this.view) $("rename-button").focus();
  }

  async finishRename() {
    if (!this.view) return;
    const id = this.view.id;
    if (!$("rename-input").value.trim()) {
      this.cancelRename(); // a blank name renames nothing (it became "Untitled" unasked)
      return;
    }
    try {
      const session = await this.api.renameSession(id, $("rename-input").value.trim());
      this.sessionChanged(session);
      this.stopRename();
      $("rename-button").focus();
    } catch (error) {
      this.showError(`Could not rename: ${error.message}`);
    }
  }

  goneElsewhere(id) {
    if (this.discarded.has(id)) return; // deleted here: Delete, or a refused first message
    this.sessionGone(id, GONE);
  }

  async deleteSession() {
    if (!this.view) return;
    const id = this.view.id;
    const title = this.sessions.get(id)?.title || "this session";
    if (!window.confirm(`Delete “${title}” and its whole history?`)) return;
    // The server closes the session's socket (an error frame, then 4404) before the
    // DELETE answers: that is this deletion, not news from elsewhere (QA: it showed the
    // alert "This conversation was deleted.", or "session '…' was deleted").
    this.discarded.add(id);
    try {
      await this.api.deleteSession(id);
    } catch (error) {
      this.discarded.delete(id);
      this.showError(`Could not delete: ${error.message}`);
      return;
    }
    this.sessionGone(id);
    this.composer.focus();
  }

  // The session is no more (deleted here, or elsewhere: its page or socket answered
  // 404): out of the list, and, if open, the first screen instead of a dead view.
  sessionGone(id, message = "") {
    this.sessions.delete(id);
    this.renderSessions();
    if (this.view?.id === id) {
      this.toFirstScreen();
      history.replaceState(null, "", location.pathname);
    }
    if (message) this.showError(message);
  }

  // --- status line ---

  setConnection(state, delay = 0) {
    const indicator = $("connection");
    indicator.dataset.state = state;
    indicator.textContent =
      state === "waiting"
        ? `Disconnected; retrying in ${Math.max(1, Math.round(delay / 1000))} s`
        : CONNECTION_LABELS[state] || state;
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
