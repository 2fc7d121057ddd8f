// The chat page's Markdown, without a browser: node --test tests/js/

import assert from "node:assert/strict";
import { test } from "node:test";

import { renderMarkdown } from "../../static/forge/markdown.js";

const WIKI = "https://en.wikipedia.org/wiki/Foo_(bar)";

test("a link whose URL holds parentheses keeps its label and its whole URL", () => {
  // A third-round finding: the label was lost, the URL cut at "(bar" and brackets shown.
  const html = renderMarkdown(`See [wiki](${WIKI}) now`);
  assert.match(html, /<a href="https:\/\/en\.wikipedia\.org\/wiki\/Foo_\(bar\)"[^>]*>wiki<\/a> now/);
  assert.doesNotMatch(html, /\[wiki\]/);
});

test("a bare URL keeps the parenthesis it opened, and not one around it", () => {
  const html = renderMarkdown(`(see ${WIKI})`);
  assert.match(html, /href="https:\/\/en\.wikipedia\.org\/wiki\/Foo_\(bar\)"/);
  assert.match(html, /<\/a>\)/);
  const plain = renderMarkdown("(see https://example.com/a)");
  assert.match(plain, /href="https:\/\/example\.com\/a"/);
});

test("a URL holding a code span is no link, and no href holds markup", () => {
  // QA: [b](https://e.com/`x`) gave <a href="https://e.com/<code>x</code>">.
  const html = renderMarkdown("[b](https://e.com/`x`)");
  assert.doesNotMatch(html, /href="[^"]*</);
  assert.match(html, /<code>x<\/code>/);
});

test("a link to an unsafe scheme stays text", () => {
  assert.doesNotMatch(renderMarkdown("[x](javascript:alert(1))"), /<a /);
});

test("a GitHub table renders as a table, its cells formatted inline", () => {
  // A third-round finding: a table showed as its raw pipe lines.
  const html = renderMarkdown("Sizes:\n\n| name | size |\n|:-----|-----:|\n| **big** | `10\\|20` |\n| small |\n\nafter");
  assert.equal(
    html,
    "<p>Sizes:</p>\n<table><thead><tr><th>name</th><th>size</th></tr></thead>" +
      "<tbody><tr><td><strong>big</strong></td><td><code>10|20</code></td></tr>" +
      "<tr><td>small</td><td></td></tr></tbody></table>\n<p>after</p>",
  );
});

test("pipes that are no table stay text, and a table's cells are escaped", () => {
  assert.equal(renderMarkdown("a | b\nc | d"), "<p>a | b<br>\nc | d</p>");
  const html = renderMarkdown("| <b>x</b> | [y](javascript:z) |\n|---|---|");
  assert.match(html, /<th>&lt;b&gt;x&lt;\/b&gt;<\/th>/);
  assert.doesNotMatch(html, /<a /);
});

test("backslash escapes make ASCII punctuation literal, outside code spans", () => {
  // A QA finding: "\*not italic\*" was italic, its backslashes shown.
  assert.equal(renderMarkdown("\\*not italic\\*"), "<p>*not italic*</p>");
  assert.equal(renderMarkdown("\\_a\\_ \\# \\[x\\](y)"), "<p>_a_ # [x](y)</p>");
  assert.equal(renderMarkdown("`a\\*b\\*` \\`not code`"), "<p><code>a\\*b\\*</code> `not code`</p>");
  assert.equal(renderMarkdown("\\\\*em*"), "<p>\\<em>em</em></p>");
  assert.equal(renderMarkdown("\\<b\\> \\& \\\" \\a"), "<p>&lt;b&gt; &amp; &quot; \\a</p>");
  assert.equal(renderMarkdown("\\# not a heading"), "<p># not a heading</p>");
});
