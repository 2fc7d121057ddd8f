// Small DOM and formatting helpers shared by the chat page's modules.

// An element with properties and children. Strings become text nodes, never HTML.
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child);
  }
  return node;
}

export const $ = (id) => document.getElementById(id);

// Put `node` into `container` before `beforeNode`, or at the end when there is none.
export function insertBefore(container, node, beforeNode) {
  if (beforeNode && beforeNode.parentNode === container) container.insertBefore(node, beforeNode);
  else container.append(node);
}

// A URL we may put in an href: this origin's paths, or http(s).
export function safeHref(url) {
  if (typeof url !== "string" || url === "") return null;
  try {
    const parsed = new URL(url, location.href);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

export function formatCost(cost) {
  const value = Number(cost) || 0;
  if (value === 0) return "$0";
  if (value >= 0.01) return `$${value.toFixed(4)}`;
  const fixed = value.toFixed(8).replace(/0+$/, "");
  return fixed === "0." ? "<$0.00000001" : `$${fixed}`;
}

export function formatTokens(tokens) {
  const t = tokens || {};
  const parts = [`${t.input ?? 0} in`, `${t.output ?? 0} out`];
  if (t.reasoning) parts.push(`${t.reasoning} reasoning`);
  if (t.cache_read || t.cache_write) parts.push(`cache ${t.cache_read ?? 0} read / ${t.cache_write ?? 0} write`);
  return `tokens: ${parts.join(", ")}`;
}

export function formatTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const today = new Date();
  return date.toDateString() === today.toDateString()
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleDateString([], { month: "short", day: "numeric" });
}

// A moment to come (an approval's expiry): its time, and its day too when not today
// ("Expires Dec 8" said no time).
export function formatMoment(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (date.toDateString() === new Date().toDateString()) return time;
  return `${date.toLocaleDateString([], { month: "short", day: "numeric" })}, ${time}`;
}

export function pretty(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}
