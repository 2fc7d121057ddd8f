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

test("a link to an unsafe scheme stays text", () => {
  assert.doesNotMatch(renderMarkdown("[x](javascript:alert(1))"), /<a /);
});
