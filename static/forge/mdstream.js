// Markdown that grows (a streamed reply), drawn in proportion to what changed.
//
// Re-rendering a whole reply on every frame costs time in proportion to its length,
// so a long reply costs the square of its length, and it wipes any selection in it.
// A MarkdownStream instead hands out each top-level block once it is finished (see
// splitMarkdown) and re-renders only the blocks after them. No DOM here: render.js
// keeps the finished blocks' nodes and replaces only the open blocks' ones.

import { splitMarkdown } from "./markdown.js";

export class MarkdownStream {
  constructor() {
    this.done = ""; // the source of the finished blocks (normalized line ends)
    this.open = ""; // the HTML of the rest, as last handed out
  }

  // The text so far. Returns {reset, finished, open}: `reset` when the text is no
  // continuation of what was finished (all is drawn again, from `finished`),
  // `finished` the HTML of each block finished since the last call, in order, and
  // `open` the HTML of the blocks after them ("" for none). The finished blocks so
  // far and `open`, joined with "\n", are renderMarkdown(text).
  update(text) {
    const source = String(text ?? "").replace(/\r\n?/g, "\n");
    let reset = false;
    if (!source.startsWith(this.done)) {
      this.done = "";
      reset = true;
    }
    const split = splitMarkdown(source.slice(this.done.length));
    this.done = source.slice(0, this.done.length + split.length);
    this.open = split.open;
    return { reset, finished: split.finished, open: split.open };
  }
}
