// The composer: the prompt box, its files, Send and Abort, and the line that says
// whether a turn runs. Enter sends, Shift+Enter starts a new line. The prompt is
// cleared when it goes and given back when it could not be sent.

import { $, formatTime } from "./dom.js";

export class Composer {
  // current(): the open session's view (see view.js), or null; startChat(text, files):
  // the first message of a new chat, sent when no session is open (a promise of
  // whether it was sent).
  // maxBytes: the server's prompt limit (FORGE_MAX_PROMPT_BYTES, 0: unknown);
  // maxFiles, maxFileBytes: its attachment limits (0: unknown);
  // showError(message) / hideError(): the page's error line.
  constructor(
    current,
    startChat,
    { maxBytes = 0, maxFiles = 0, maxFileBytes = 0, showError = () => {}, hideError = () => {} } = {},
  ) {
    this.lastSent = ""; // the text of the send in progress
    this.current = current;
    this.startChat = startChat;
    this.maxBytes = maxBytes;
    this.maxFiles = maxFiles;
    this.maxFileBytes = maxFileBytes;
    this.showError = showError;
    this.hideError = hideError;
    this.form = $("composer");
    this.prompt = $("prompt");
    this.files = $("files");
    this.sendButton = $("send-button");
    this.abortButton = $("abort-button");
    this.status = $("turn-status");
  }

  start() {
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    this.prompt.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    // Files dropped on the page are picked, as with the picker (QA: a drop did nothing,
    // and the browser's own drop opened the file in the tab, leaving the chat). Anywhere
    // on it: the conversation is the large target, and a drop there did the same (QA).
    document.addEventListener("dragover", (event) => {
      if (event.dataTransfer?.types.includes("Files")) event.preventDefault();
    });
    document.addEventListener("drop", (event) => {
      if (!event.dataTransfer?.files.length) return;
      event.preventDefault();
      this.files.files = event.dataTransfer.files;
      this.prompt.focus();
    });
    // The button is disabled once the reply ends: the keyboard goes back to the prompt
    // box, as after Send (QA: it fell to the page's body).
    this.abortButton.addEventListener("click", () => {
      this.current()?.abort();
      this.prompt.focus();
    });
  }

  async submit() {
    const view = this.current();
    const text = this.prompt.value;
    const files = [...this.files.files];
    if (text.trim() === "" && files.length === 0) return;
    if (text.trim() === "") {
      // The server takes files with a message only (it answered "text: This field may
      // not be blank."): say so here, and keep the files picked.
      this.showError("Add a message to send with the files.");
      return;
    }
    if (view && (view.busy || view.pending.size > 0 || view.uploading)) return;
    // Over the limit the server refuses it; far over, the socket closes before it can
    // say so. Say it here, and leave the text where it is.
    const size = new TextEncoder().encode(text).length;
    if (this.maxBytes > 0 && size > this.maxBytes) {
      this.showError(`The prompt is ${size} bytes; the limit is ${this.maxBytes} (too_large).`);
      return;
    }
    // Files over the limits are refused here, before they are uploaded (a 30 MB file
    // went up whole, then got its 413); the files stay picked, the text in the box.
    const refused = this.refusedFiles(files);
    if (refused) {
      this.showError(refused);
      return;
    }
    this.prompt.value = "";
    this.lastSent = text; // kept when a 401 sends the page to sign in (chat.keepDraft)
    const sent = view ? await view.sendPrompt(text, files) : await this.startChat(text, files);
    if (sent) {
      this.lastSent = "";
      this.files.value = "";
      this.hideError(); // an earlier refusal's line is no longer the news
    } else if (this.prompt.value === "") {
      this.prompt.value = text;
    }
    this.prompt.focus();
  }

  // Why these files cannot be sent (the server's limits), or null.
  refusedFiles(files) {
    if (this.maxFiles > 0 && files.length > this.maxFiles) {
      return `${files.length} files are picked; at most ${this.maxFiles} go with a message (invalid_prompt).`;
    }
    const big = this.maxFileBytes > 0 ? files.find((file) => file.size > this.maxFileBytes) : undefined;
    if (big) {
      return `${big.name} is ${big.size} bytes; a file may have ${this.maxFileBytes} (too_large).`;
    }
    return null;
  }

  // A prompt the server refused: back into the box, unless something new is there.
  giveBack(text) {
    if (this.prompt.value.trim() === "") this.prompt.value = text;
  }

  // Take back a text given back (it had been sent after all), unless the user has
  // changed the box meanwhile.
  takeBack(text) {
    if (this.prompt.value === text) this.prompt.value = "";
  }

  // busy: a turn runs; waiting: a prompt is not acknowledged yet (uploading: it goes
  // over HTTP, with its files, and is not answered yet); retry: the
  // model is unavailable and the server retries ({attempt, next_at}) or null.
  // awaiting: the open reply waits for a tool call's approval (a new prompt may be sent,
  // and denies it; Abort ends the reply).
  show({ busy, waiting, uploading, retry, awaiting, finished }) {
    this.abortButton.disabled = !(busy || awaiting);
    this.sendButton.disabled = busy || waiting;
    if (retry) {
      const at = retry.next_at ? ` at ${formatTime(retry.next_at)}` : "";
      this.status.textContent = `The model is unavailable; retrying (attempt ${retry.attempt ?? "?"})${at}…`;
    } else if (busy) {
      this.status.textContent = "Working…";
    } else if (uploading) {
      this.status.textContent = "Sending…";
    } else if (awaiting) {
      this.status.textContent = "Waiting for your approval of a tool call.";
    } else {
      this.status.textContent = finished && !waiting ? "Reply ended." : "";
    }
  }

  focus() {
    this.prompt.focus();
  }
}
