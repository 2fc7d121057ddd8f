// The HTTP API, as the chat page uses it: JSON in and out, the CSRF token on every
// unsafe request, `{"error": {code, message}}` bodies as ApiError, a 401 sends the
// browser to the login page, and the paged lists followed by their `next` URLs.

export class ApiError extends Error {
  constructor(status, body) {
    const error = body && typeof body === "object" && body.error ? body.error : {};
    super(error.message || `request failed (HTTP ${status})`);
    this.status = status;
    this.code = error.code || `http_${status}`;
  }
}

function cookie(name) {
  for (const item of document.cookie.split(";")) {
    const [key, ...rest] = item.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return "";
}

// A path on this origin for a URL the API handed out (absolute or not).
export function localUrl(url) {
  const parsed = new URL(url, location.href);
  return parsed.pathname + parsed.search;
}

export class Api {
  // base: "/api/"; loginUrl: where a 401 sends the browser.
  constructor({ base, loginUrl }) {
    this.base = base;
    this.loginUrl = loginUrl;
  }

  toLogin() {
    this.beforeLogin?.(); // the page keeps what would be lost (chat.js: the draft)
    // The route (#/s/<id>) too: signing in again opens the conversation the user was in.
    const next = location.pathname + location.search + location.hash;
    location.assign(`${this.loginUrl}?next=${encodeURIComponent(next)}`);
  }

  async request(url, { method = "GET", json, form } = {}) {
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
      this.toLogin();
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

  sessionUrl(id, rest = "") {
    return `${this.base}sessions/${encodeURIComponent(id)}/${rest}`;
  }

  // The page a paged list's `next` points to.
  next(url) {
    return this.request(localUrl(url));
  }

  // --- sessions ---

  listSessions(limit = 50) {
    return this.request(`${this.base}sessions/?limit=${limit}`);
  }

  createSession() {
    return this.request(`${this.base}sessions/`, { method: "POST", json: {} });
  }

  session(id) {
    return this.request(this.sessionUrl(id));
  }

  renameSession(id, title) {
    return this.request(this.sessionUrl(id), { method: "PATCH", json: { title } });
  }

  deleteSession(id) {
    return this.request(this.sessionUrl(id), { method: "DELETE" });
  }

  // --- one session's history and turns ---

  // The newest page of messages; older ones follow the page's `next`.
  messages(id, limit) {
    return this.request(`${this.sessionUrl(id, "messages/")}?limit=${limit}`);
  }

  // The durable events after `after`, a page at a time (stop iterating to stop).
  async *eventPages(id, after) {
    let url = `${this.sessionUrl(id, "events/")}?after=${after}`;
    while (url) {
      const page = await this.request(url);
      yield page.results;
      url = page.next ? localUrl(page.next) : null;
    }
  }

  // A prompt over HTTP. JSON unless there are files: a form would turn the text's
  // line breaks into CRLF.
  prompt(id, text, files = []) {
    if (files.length === 0) {
      return this.request(this.sessionUrl(id, "messages/"), { method: "POST", json: { text } });
    }
    const form = new FormData();
    form.append("text", text);
    for (const file of files) form.append("files", file);
    return this.request(this.sessionUrl(id, "messages/"), { method: "POST", form });
  }

  // Allow or deny a tool call awaiting approval: body {approve, reason?}.
  answerApproval(id, callId, body) {
    const url = this.sessionUrl(id, `approvals/${encodeURIComponent(callId)}/`);
    return this.request(url, { method: "POST", json: body });
  }

  abort(id) {
    return this.request(this.sessionUrl(id, "abort/"), { method: "POST" });
  }
}
