// The program editor: a textarea with line numbers and a highlight layer
// behind it (for the node an API error points at), plus a tiny JSON scanner
// that finds where a path such as `XY.kernel` is written in the text.

import {esc} from "./util.js";

/**
 * Scan JSON text and record where every member is: a Map from a path key
 * (JSON.stringify of the path array) to {keyStart, keyEnd, valueStart, valueEnd}.
 * Tolerant: stops quietly at the first syntax error.
 */
export function scanJson(text) {
  const spans = new Map();
  let i = 0;
  const ws = () => { while (i < text.length && /\s/.test(text[i])) i++; };
  const str = () => {
    const start = i;
    i++; // opening quote
    let out = "";
    while (i < text.length && text[i] !== '"') {
      if (text[i] === "\\") { out += text[i + 1] === '"' ? '"' : text[i + 1]; i += 2; } else { out += text[i++]; }
    }
    i++;
    return {value: out, start, end: i};
  };
  const value = (path) => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      ws();
      if (text[i] === "}") { i++; return; }
      while (i < text.length) {
        ws();
        if (text[i] !== '"') throw new Error("key");
        const k = str();
        ws();
        if (text[i] !== ":") throw new Error(":");
        i++;
        ws();
        const vs = i;
        const p = path.concat([k.value]);
        const span = {keyStart: k.start, keyEnd: k.end, valueStart: vs, valueEnd: vs};
        spans.set(JSON.stringify(p), span);
        value(p);
        span.valueEnd = i;
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "}") { i++; return; }
        throw new Error("}");
      }
    } else if (c === "[") {
      i++;
      ws();
      if (text[i] === "]") { i++; return; }
      let n = 0;
      while (i < text.length) {
        ws();
        const vs = i;
        const p = path.concat([n]);
        const span = {keyStart: vs, keyEnd: vs, valueStart: vs, valueEnd: vs};
        spans.set(JSON.stringify(p), span);
        value(p);
        span.valueEnd = i;
        span.keyEnd = i;
        n++;
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "]") { i++; return; }
        throw new Error("]");
      }
    } else if (c === '"') {
      str();
    } else {
      while (i < text.length && /[^\s,\]}]/.test(text[i])) i++;
    }
  };
  try { value([]); } catch (_) { /* partial map is fine */ }
  return spans;
}

/** Split an error's `at` ("XY.kernel", "data.X", "XY.left_keys[0]") into path parts. */
export function splitAt(at) {
  const parts = [];
  for (const piece of String(at).split(".")) {
    const m = piece.match(/^([^\[]*)((?:\[\d+\])*)$/);
    if (!m) { parts.push(piece); continue; }
    if (m[1]) parts.push(m[1]);
    for (const ix of m[2].matchAll(/\[(\d+)\]/g)) parts.push(Number(ix[1]));
  }
  return parts;
}

/**
 * Where the text names `at`: {start, end, exact} (character offsets), or null.
 * Tries nodes.<at>, inputs.<at>, then <at> from the top, each time dropping
 * trailing parts until something matches.
 */
export function locate(text, at) {
  if (!at) return null;
  const spans = scanJson(text);
  const parts = splitAt(at);
  const roots = [["nodes"], ["inputs"], []];
  for (let len = parts.length; len > 0; len--) {
    for (const root of roots) {
      const path = root.concat(parts.slice(0, len));
      const s = spans.get(JSON.stringify(path));
      if (!s) continue;
      const small = s.valueEnd - s.valueStart <= 80 && !text.slice(s.valueStart, s.valueEnd).includes("\n");
      return {start: s.keyStart, end: small ? s.valueEnd : s.keyEnd, exact: len === parts.length};
    }
  }
  return null;
}

/**
 * The JSON `text` with member `key` of the object at `path` set to
 * `valueText` (JSON), everything else kept as written: the value replaced in
 * place, or the member added after the object's last one, indented like its
 * first. The text must be valid JSON and `path` must name an object (or be []
 * for the top level); null otherwise.
 */
export function setMember(text, path, key, valueText) {
  const spans = scanJson(text);
  const own = spans.get(JSON.stringify([...path, key]));
  if (own) return text.slice(0, own.valueStart) + valueText + text.slice(own.valueEnd);
  let start, end;
  if (path.length === 0) {
    start = text.indexOf("{");
    end = text.lastIndexOf("}");
  } else {
    const o = spans.get(JSON.stringify(path));
    if (!o || text[o.valueStart] !== "{") return null;
    start = o.valueStart;
    end = o.valueEnd - 1;
  }
  if (start < 0 || end <= start || text[end] !== "}") return null;
  const inner = text.slice(start + 1, end);
  const member = JSON.stringify(key) + ": " + valueText;
  if (!inner.trim()) return text.slice(0, start + 1) + member + text.slice(end);
  const indent = inner.match(/\n([ \t]*)"/);
  const after = start + 1 + inner.trimEnd().length;
  return text.slice(0, after) + (indent ? ",\n" + indent[1] : ", ") + member + text.slice(after);
}

/** Offset of line/column (1-based) in text. */
export function offsetOf(text, line, col) {
  let off = 0;
  for (let l = 1; l < line; l++) {
    const nl = text.indexOf("\n", off);
    if (nl < 0) return text.length;
    off = nl + 1;
  }
  return Math.min(text.length, off + Math.max(0, col - 1));
}

/** The editor widget around a textarea. */
export class Editor {
  constructor(root) {
    this.root = root;
    this.ta = root.querySelector("textarea");
    this.gutter = root.querySelector(".gutter");
    this.backdrop = root.querySelector(".backdrop");
    this.mark = null;
    this.ta.addEventListener("input", () => { this.mark = null; this.paint(); });
    this.ta.addEventListener("scroll", () => this.sync());
    this.paint();
  }

  get value() { return this.ta.value; }

  set value(v) {
    this.ta.value = v;
    this.mark = null;
    this.paint();
    this.ta.scrollTop = 0;
  }

  /** Replace the text as an edit would (keeps the scroll position and the caret where it can). */
  replace(v) {
    const {scrollTop, scrollLeft, selectionStart, selectionEnd} = this.ta;
    const focused = document.activeElement === this.ta;
    this.ta.value = v;
    this.mark = null;
    this.ta.scrollTop = scrollTop;
    this.ta.scrollLeft = scrollLeft;
    if (focused) this.ta.setSelectionRange(Math.min(selectionStart, v.length), Math.min(selectionEnd, v.length));
    this.paint();
  }

  /** Highlight [start, end) and bring it into view (and select it). */
  highlight(start, end, {focus = false} = {}) {
    this.mark = {start, end: Math.max(end, start + 1)};
    this.paint();
    const line = this.ta.value.slice(0, start).split("\n").length;
    const lh = parseFloat(getComputedStyle(this.ta).lineHeight) || 18;
    this.ta.scrollTop = Math.max(0, (line - 4) * lh);
    this.sync();
    if (focus) {
      this.ta.focus({preventScroll: true});
      this.ta.setSelectionRange(start, end);
    }
    return line;
  }

  clear() {
    this.mark = null;
    this.paint();
  }

  paint() {
    const text = this.ta.value;
    const lines = text.split("\n").length;
    let markLine = -1;
    if (this.mark) {
      const {start, end} = this.mark;
      markLine = text.slice(0, start).split("\n").length;
      this.backdrop.innerHTML = esc(text.slice(0, start)) + "<mark>" + esc(text.slice(start, end) || " ") + "</mark>" + esc(text.slice(end)) + "\n";
    } else {
      this.backdrop.textContent = text + "\n";
    }
    let g = "";
    for (let l = 1; l <= lines; l++) g += l === markLine ? "<b>" + l + "</b>\n" : l + "\n";
    this.gutter.innerHTML = g;
    this.sync();
  }

  sync() {
    this.backdrop.scrollTop = this.ta.scrollTop;
    this.backdrop.scrollLeft = this.ta.scrollLeft;
    this.gutter.scrollTop = this.ta.scrollTop;
  }
}
