// Markdown for model output, safe by construction.
//
// The whole source is HTML-escaped FIRST (& < > " '), and only then are tags
// added, from a fixed set: p, br, h1-h6, strong, em, del, code, pre, ul, ol, li,
// blockquote, hr, a, and a table's table, thead, tbody, tr, th and td. No tag ever takes an attribute from the source except a
// link's href, and a link is made only for http:, https: and mailto: URLs
// (checked on the escaped text, which can hold no quote and no angle bracket).
// Anything else (`javascript:`, `data:`, raw HTML) stays visible as text.
//
// So whatever a reply holds, the returned string contains no markup the model
// wrote: it is fit for innerHTML.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// A URL we link to, as it reads after escaping: a safe scheme, then no white space.
const SAFE_URL = /^(?:https?:\/\/|mailto:)\S+$/i;
// Placeholders for finished inline HTML: \u0000<n>\u0000 (NUL never survives the input).
const TOKEN = /\u0000(\d+)\u0000/g;
const MAX_DEPTH = 6;
// A backslash before ASCII punctuation (CommonMark), which the text holds escaped
// when it is one of & < > " ', or a code span.
const CODE_OR_ESCAPE =
  /\\(&(?:amp|lt|gt|quot|#39);|[!#$%()*+,\-./:;=?@[\\\]^_`{|}~])|(`+)([^`\n]|[^`\n][^\n]*?[^`\n])\2(?!`)/g;

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([A-Za-z0-9_+#.-]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}&gt; ?/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
const BLANK = /^[ \t]*$/;
// A table (GitHub's): a header row, a delimiter row ("|---|:---:|"), then body rows.
const TABLE_ROW = /^ {0,3}\|?.*\|.*$/;
const TABLE_DELIMITER = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

export function renderMarkdown(source) {
  return renderBlocks(sourceLines(source), 0, false);
}

function sourceLines(source) {
  const text = String(source ?? "")
    .replace(/\r\n?/g, "\n")
    .replace(/\u0000/g, "\uFFFD");
  return escapeHtml(text).split("\n");
}

// Markdown still being written (a streamed reply), cut into its top-level blocks:
// `finished`, the HTML of each block that no text added to `source` can change any
// more, `length`, how many characters of `source` those blocks take, and `open`, the
// HTML of the rest. For any `more`:
//
//   renderMarkdown(source + more) ===
//     [...finished, ...splitMarkdown(source.slice(length) + more) blocks].join("\n")
//
// (renderMarkdown joins top-level blocks with "\n"), so a page can keep the finished
// blocks and redraw only the rest as the text grows. `source` must have "\n" line ends
// (lengths count its characters); the last line may be cut anywhere.
//
// A block is finished when the next block has started on a line that is complete
// (a line break follows it), after a blank line, or with one more complete line
// after it (a paragraph ends before a line that starts a table only if the line
// after it is the table's delimiter row). An open code fence or a list that may go on
// after its blank lines holds no such start: the parse that finds the starts is the
// one that renders.
export function splitMarkdown(source) {
  const lines = sourceLines(source);
  const blocks = { starts: [], html: [] };
  renderBlocks(lines, 0, false, blocks);
  // lines[lines.length - 1] is the unfinished last line.
  let cut = 0;
  for (let k = blocks.starts.length - 1; k > 0; k -= 1) {
    const start = blocks.starts[k];
    const settled = BLANK.test(lines[start - 1]) ? start + 1 : start + 2;
    if (settled < lines.length) {
      cut = k;
      break;
    }
  }
  let length = 0;
  if (cut > 0) {
    // Source lines and escaped lines break at the same places.
    const raw = String(source ?? "").split("\n");
    for (let n = 0; n < blocks.starts[cut]; n += 1) length += raw[n].length + 1;
  }
  return { finished: blocks.html.slice(0, cut), length, open: blocks.html.slice(cut).join("\n") };
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

function startsTable(lines, i) {
  return (
    i + 1 < lines.length &&
    TABLE_ROW.test(lines[i]) &&
    TABLE_DELIMITER.test(lines[i + 1]) &&
    cells(lines[i]).length === cells(lines[i + 1]).length
  );
}

// A row's cells: split on "|" (not "\|"), the outer pipes dropped, each trimmed.
function cells(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

// One table from lines[start] (startsTable is true there); pushes its HTML, returns the
// index after it. Rows are cut or padded to the header's width.
function renderTable(lines, start, out) {
  const head = cells(lines[start]);
  const width = head.length;
  const row = (values, tag) =>
    `<tr>${Array.from({ length: width }, (_, n) => `<${tag}>${inline(values[n] ?? "")}</${tag}>`).join("")}</tr>`;
  const body = [];
  let i = start + 2;
  while (i < lines.length && !BLANK.test(lines[i]) && TABLE_ROW.test(lines[i]) && !startsBlock(lines[i])) {
    body.push(row(cells(lines[i]), "td"));
    i += 1;
  }
  const tbody = body.length ? `<tbody>${body.join("")}</tbody>` : "";
  out.push(`<table><thead>${row(head, "th")}</thead>${tbody}</table>`);
  return i;
}

// Lines are already escaped. `tight`: paragraphs without <p> (inside list items).
// `blocks` (optional, top level): gets each block's first line and HTML.
function renderBlocks(lines, depth, tight, blocks = null) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i += 1;
      continue;
    }
    blocks?.starts.push(i); // every branch below pushes exactly one block to `out`
    let m = line.match(FENCE);
    if (m) {
      const fence = m[1];
      const lang = m[2];
      const body = [];
      i += 1;
      while (i < lines.length && !isClosingFence(lines[i], fence)) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or the end)
      const cls = lang ? ` class="language-${lang}"` : "";
      out.push(`<pre><code${cls}>${body.join("\n")}</code></pre>`);
      continue;
    }
    m = line.match(HEADING);
    if (m) {
      const level = m[1].length;
      out.push(`<h${level}>${inline(m[2])}</h${level}>`);
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      out.push("<hr>");
      i += 1;
      continue;
    }
    if (QUOTE.test(line) && depth < MAX_DEPTH) {
      const inner = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        inner.push(lines[i].replace(QUOTE, ""));
        i += 1;
      }
      out.push(`<blockquote>${renderBlocks(inner, depth + 1, false)}</blockquote>`);
      continue;
    }
    m = line.match(ITEM);
    if (m && depth < MAX_DEPTH) {
      i = renderList(lines, i, depth, out);
      continue;
    }
    if (startsTable(lines, i)) {
      i = renderTable(lines, i, out);
      continue;
    }
    // A paragraph: up to a blank line or the start of another block.
    const para = [line.trim()];
    i += 1;
    while (i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i]) && !startsTable(lines, i)) {
      para.push(lines[i].trim());
      i += 1;
    }
    const body = para.map(inline).join("<br>\n");
    out.push(tight ? { text: body } : `<p>${body}</p>`);
  }
  if (blocks) blocks.html = out;
  // Tight (in a list item): consecutive paragraphs are separated by a line break.
  let html = "";
  out.forEach((block, n) => {
    const isText = typeof block === "object";
    if (n > 0) html += isText && typeof out[n - 1] === "object" ? "<br>\n" : "\n";
    html += isText ? block.text : block;
  });
  return html;
}

function isClosingFence(line, fence) {
  const trimmed = line.trim();
  return trimmed.length >= fence.length && trimmed === fence[0].repeat(trimmed.length);
}

function listKind(marker) {
  return /\d/.test(marker) ? `ol${marker.slice(-1)}` : `ul${marker}`;
}

// One list from lines[start]; pushes its HTML and returns the index after it.
function renderList(lines, start, depth, out) {
  const first = lines[start].match(ITEM);
  const kind = listKind(first[2]);
  const ordered = kind.startsWith("ol");
  const items = [];
  let i = start;
  while (i < lines.length) {
    const m = lines[i].match(ITEM);
    if (!m || listKind(m[2]) !== kind) break;
    const indent = m[1].length + m[2].length + 1;
    const body = [m[3]];
    i += 1;
    // The item goes on over indented lines (and blank lines followed by indented ones),
    // and over lazy continuation lines of its paragraph.
    while (i < lines.length) {
      const next = lines[i];
      if (BLANK.test(next)) {
        let j = i;
        while (j < lines.length && BLANK.test(lines[j])) j += 1;
        if (j < lines.length && leadingSpaces(lines[j]) >= Math.min(indent, 4) && !ITEM.test(lines[j])) {
          for (; i < j; i += 1) body.push("");
          continue;
        }
        if (j < lines.length && leadingSpaces(lines[j]) >= 2 && ITEM.test(lines[j].trimStart())) {
          for (; i < j; i += 1) body.push("");
          continue;
        }
        break;
      }
      if (leadingSpaces(next) >= 2) {
        body.push(dedent(next, indent));
        i += 1;
        continue;
      }
      if (startsBlock(next)) break;
      body.push(next.trim()); // lazy continuation
      i += 1;
    }
    items.push(`<li>${renderBlocks(body, depth + 1, true)}</li>`);
    // Blank lines between items of the same list keep the list going.
    let j = i;
    while (j < lines.length && BLANK.test(lines[j])) j += 1;
    if (j > i && j < lines.length) {
      const m2 = lines[j].match(ITEM);
      if (m2 && listKind(m2[2]) === kind) i = j;
    }
  }
  const tag = ordered ? "ol" : "ul";
  const number = ordered ? parseInt(first[2], 10) : 1;
  const startAttr = ordered && number !== 1 ? ` start="${number}"` : "";
  out.push(`<${tag}${startAttr}>${items.join("")}</${tag}>`);
  return i;
}

// The line without up to `width` columns of leading white space.
function dedent(line, width) {
  let column = 0;
  let n = 0;
  while (n < line.length && column < width && (line[n] === " " || line[n] === "\t")) {
    column += line[n] === "\t" ? 4 : 1;
    n += 1;
  }
  return line.slice(n);
}

function leadingSpaces(line) {
  const m = line.match(/^[ \t]*/);
  return m[0].replace(/\t/g, "    ").length;
}

// --- inline ---------------------------------------------------------------------

function inline(text) {
  const tokens = [];
  const stash = (html) => `\u0000${tokens.push(html) - 1}\u0000`;

  // Code spans and backslash escapes first, in one pass from the left (a backslash
  // escape does not work inside a code span, and an escaped backtick opens none).
  // Nothing inside a code span is formatted; an escaped character is only itself.
  text = text.replace(CODE_OR_ESCAPE, (_, char, ticks, code) =>
    char !== undefined
      ? stash(char)
      : stash(`<code>${code.trim() === "" ? code : code.replace(/^ (.*) $/, "$1")}</code>`),
  );
  // [label](url): a link only when the URL is safe; otherwise the text stays as it is.
  // The URL may hold balanced parentheses (Wikipedia's ".../Foo_(bar)").
  text = text.replace(/\[([^\]\n]+)\]\(((?:[^()\s]|\([^()\s]*\))+)(?:[ \t]+&quot;[^\n]*?&quot;)?\)/g, (whole, label, url) => {
    if (!SAFE_URL.test(url)) return whole;
    // A code span binds first (CommonMark): a URL holding one is no link (it was one,
    // with the span's <code> restored inside its href).
    if ([...url.matchAll(/\u0000(\d+)\u0000/g)].some((m) => tokens[m[1]].startsWith("<code>"))) return whole;
    return stash(link(url, emphasis(label)));
  });
  // Bare http(s) URLs. "&" only as "&amp;", so an escaped quote or bracket ends the URL.
  text = text.replace(/\bhttps?:\/\/(?:[^\s&\u0000]|&amp;)+/gi, (found) => {
    let url = found.replace(/(?:[.,:;!?*_~)\]]|&amp;)+$/, "");
    // A ")" the URL opened is the URL's: "(see https://x/Foo_(bar))" keeps one.
    while (url.length < found.length && found[url.length] === ")" && count(url, "(") > count(url, ")")) {
      url = found.slice(0, url.length + 1);
    }
    const rest = found.slice(url.length);
    if (!SAFE_URL.test(url) || /^https?:\/\/$/i.test(url)) return found;
    return stash(link(url, url)) + rest;
  });
  text = emphasis(text);
  return restore(text, tokens);
}

function count(text, char) {
  return text.split(char).length - 1;
}

function link(url, label) {
  return `<a href="${url}" rel="noopener noreferrer" target="_blank">${label}</a>`;
}

function emphasis(text) {
  return text
    .replace(/\*\*(?=\S)([^\n]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w])__(?=\S)([^\n]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
    .replace(/~~(?=\S)([^\n]*?\S)~~/g, "<del>$1</del>")
    .replace(/(^|[^\w*])\*(?=[^\s*])([^\n*]*?[^\s*])\*(?![\w*])/g, "$1<em>$2</em>")
    .replace(/(^|[^\w])_(?=[^\s_])([^\n_]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>");
}

function restore(text, tokens) {
  return text.replace(TOKEN, (_, n) => restore(tokens[Number(n)] ?? "", tokens));
}
