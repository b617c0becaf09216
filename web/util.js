// Small helpers shared by the page's modules.

/** Escape text for HTML. */
export function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

/** A number with thousands separators. */
export function full(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en-US", {maximumFractionDigits: 3});
}

/** A number in SI units: 64000000 → "64 M", 1.28e11 → "128 G". */
export function si(n) {
  if (n === null || n === undefined || Number.isNaN(Number(n))) return "–";
  n = Number(n);
  const a = Math.abs(n);
  const units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [v, u] of units) {
    if (a >= v) {
      const x = n / v;
      return trimZeros(Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2)) + " " + u;
    }
  }
  return Number.isInteger(n) ? String(n) : trimZeros(n.toFixed(a >= 10 ? 1 : 3));
}

/** "1.50" → "1.5", "2.00" → "2", "300" → "300". */
function trimZeros(s) {
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
}

/**
 * A float to read in full, without thousands separators (a checksum):
 * -1007.2345678 → "-1007.234568", 1.5e20 → "1.500000e+20".
 */
export function exact(x) {
  if (x === null || x === undefined || Number.isNaN(Number(x))) return "–";
  x = Number(x);
  const a = Math.abs(x);
  if (a !== 0 && (a >= 1e15 || a < 1e-4)) return x.toExponential(6);
  return String(Number(x.toPrecision(10)));
}

/** Milliseconds, readable. */
export function ms(x) {
  if (x === null || x === undefined) return "–";
  return x >= 100 ? x.toFixed(0) + " ms" : x >= 1 ? x.toFixed(1) + " ms" : x.toFixed(3) + " ms";
}

/** A kernel as text: "matMul" or "compose(diag, matAdd)". */
export function kernelText(k) {
  if (k === undefined || k === null) return "";
  if (typeof k === "string") return k;
  if (k.compose) return "compose(" + k.compose.map(kernelText).join(", ") + ")";
  return JSON.stringify(k);
}

/** Bounds as "4×4×4". */
export function dims(b) {
  return Array.isArray(b) ? (b.length ? b.join("×") : "scalar") : "?";
}

/** The names a plan/program node reads. */
export function operandsOf(node) {
  return ["input", "left", "right"].filter((k) => typeof node[k] === "string").map((k) => node[k]);
}

/** Create an SVG element with attributes. */
export function svgEl(tag, attrs = {}, parent = null) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

/** Shorten text to n characters with an ellipsis. */
export function clip(s, n) {
  s = String(s);
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

/** Run async jobs with at most `limit` at once; `jobs` are functions returning promises. */
export async function pool(jobs, limit) {
  const results = new Array(jobs.length);
  let next = 0;
  async function worker() {
    while (next < jobs.length) {
      const i = next++;
      try {
        results[i] = await jobs[i]();
      } catch (e) {
        results[i] = {error: e};
      }
    }
  }
  await Promise.all(Array.from({length: Math.min(limit, jobs.length)}, worker));
  return results;
}

/** A palette for alternatives, by rank (colour-blind friendly, Okabe–Ito-ish). */
export const PALETTE = ["#0b7a4b", "#1f5fbf", "#d55e00", "#8e44ad", "#b8860b", "#cc3d8a", "#2a9d8f", "#5f6673", "#e76f51", "#264653",
  "#7a8f00", "#9c2f2f", "#00838f", "#6d4c41"];

/** The letter of the i-th series: A, B, …, Z, AA, AB, … */
export function seriesTag(i) {
  let s = "";
  i += 1;
  while (i > 0) {
    const r = (i - 1) % 26;
    s = String.fromCharCode(65 + r) + s;
    i = Math.floor((i - 1) / 26);
  }
  return s;
}
