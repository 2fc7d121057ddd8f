// Streamed Markdown, drawn block by block, must end as the whole text drawn at once:
// node --test tests/js/

import assert from "node:assert/strict";
import { test } from "node:test";

import { renderMarkdown, splitMarkdown } from "../../static/forge/markdown.js";
import { MarkdownStream } from "../../static/forge/mdstream.js";

const SAMPLES = [
  "Hello **world**.\n\nSecond paragraph\nwith two lines.\n\n# Heading\nText right after.\n",
  "Intro\n\n```js\nconst a = 1;\n\nconst b = `x`;\n\n```\n\nafter the fence\n\n~~~\nnever closed\n\n# not a heading\n",
  "- one\n- two\n\n- three, loose\n\n  indented continuation\n\n  - nested\n\n    deeper\n\nafter the list\n\n1. a\n2. b\n\n3) c\n\n- x\n",
  "Sizes:\n| name | size |\n|:-----|-----:|\n| **big** | `10\\|20` |\n| small |\n\nafter\n\n| a | b |\n|---|---|\nplain\n",
  "> quoted\n> more\n\n> again\n>\n> - list in quote\n\nend\n---\n***\n- - -\ntext\n",
  "para\n# heading directly\n```\ncode directly\n```\n> quote directly\n- item directly\n  lazy\ncontinuation\n\n\n\nfar\n",
  "\\*not italic\\* and \\`not code` and `code \\` span` \\\\ \\<b\\>\n\n\\# no heading\n\n1\\. no list\n",
  "Windows\r\nline\r\n\r\nends\r\n\r\n- a\r\n- b\r\n\r\nend",
  "<script>alert(1)</script>\n\n[x](javascript:alert(1)) [ok](https://example.com/a_(b)) https://example.com/x.\n\n\u0000 nul\n",
  "\n\n\nleading blank lines\n\n   \n\t\ntrailing blanks\n\n\n",
  "- a\n\n\n\n- b\n\n  ```\n  code in item\n\n  ```\n\nx\n\n    indented text\n\n* other kind\n+ third kind\n",
  "a | b\nc | d\n\nhead | x\n--- | ---\nrow | y\n\n#####\n####### seven\n",
];

// Pieces the model might write: the random texts below are made of them.
const PIECES = [
  "word ", "**bold** ", "*em* ", "`code` ", "\\*", "| a | b |", "|---|---|", "\n", "\n\n", "- item",
  "1. first", "  ", "    ", "> ", "# ", "```", "~~~", "---", "[l](https://x.y/z)", "<b>&amp;", "\t", "\r\n", "_u_",
];

function randomText(random, parts) {
  let text = "";
  for (let n = 0; n < parts; n += 1) text += PIECES[Math.floor(random() * PIECES.length)];
  return text;
}

// A small seeded generator (mulberry32), so a failure can be replayed.
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Feed `text` cut at `cuts` (growing lengths); after each update, what a page holds
// (every finished block, then the open HTML) must be the whole prefix rendered at once.
function stream(text, cuts) {
  const md = new MarkdownStream();
  let blocks = [];
  let finishedCount = 0;
  for (const cut of [...cuts, text.length]) {
    const prefix = text.slice(0, cut);
    const { reset, finished, open } = md.update(prefix);
    assert.equal(reset, false);
    blocks.push(...finished);
    finishedCount += finished.length;
    const shown = [...blocks, open].filter((html) => html !== "").join("\n");
    assert.equal(shown, renderMarkdown(prefix), `text ${JSON.stringify(text)} cut at ${cut}`);
  }
  blocks = [];
  return finishedCount;
}

test("streamed at every length, each sample shows what rendering it whole shows", () => {
  for (const text of SAMPLES) {
    stream(text, Array.from({ length: text.length }, (_, n) => n));
  }
});

test("streamed in random chunks, random texts show what rendering them whole shows", () => {
  const random = seeded(20240917);
  for (let round = 0; round < 1500; round += 1) {
    const text = randomText(random, 5 + Math.floor(random() * 40));
    const cuts = [];
    for (let at = 0; at < text.length; at += 1 + Math.floor(random() * 8)) cuts.push(at);
    stream(text, cuts);
  }
});

test("every split of a random text holds for every continuation tried", () => {
  const random = seeded(7);
  for (let round = 0; round < 400; round += 1) {
    const text = randomText(random, 3 + Math.floor(random() * 25)).replace(/\r/g, "");
    for (let cut = 0; cut <= text.length; cut += 1) {
      const head = text.slice(0, cut);
      const { finished, length } = splitMarkdown(head);
      const rest = splitMarkdown(text.slice(length));
      const whole = [...finished, ...rest.finished, rest.open].filter((html) => html !== "").join("\n");
      assert.equal(whole, renderMarkdown(text), `text ${JSON.stringify(text)} split after ${JSON.stringify(head)}`);
    }
  }
});

test("a long reply leaves only its last blocks open", () => {
  const paragraph = (n) => `Paragraph ${n} with **bold**, \`code\` and a [link](https://example.com/${n}).`;
  const parts = [];
  for (let n = 0; n < 200; n += 1) {
    parts.push(paragraph(n), n % 10 === 0 ? "```py\nprint(1)\n\nprint(2)\n```" : "- a\n- b");
  }
  const text = parts.join("\n\n");
  const md = new MarkdownStream();
  let finished = 0;
  let largestOpen = 0;
  for (let at = 0; at <= text.length; at += 37) {
    const update = md.update(text.slice(0, at));
    finished += update.finished.length;
    largestOpen = Math.max(largestOpen, update.open.length);
  }
  assert.ok(finished >= 390, `only ${finished} blocks finished`);
  assert.ok(largestOpen < 400, `an open part of ${largestOpen} characters`);
});

test("text that is no continuation starts again", () => {
  const md = new MarkdownStream();
  md.update("first\n\nsecond\n\nthird");
  const { reset, finished, open } = md.update("other\n\ntext");
  assert.equal(reset, true);
  assert.equal([...finished, open].join("\n"), renderMarkdown("other\n\ntext"));
});
