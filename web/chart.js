// The sites chart: each alternative's cost against the number of sites, the
// chosen alternative per site count as a strip under the axis, and a dashed
// line wherever the choice flips.

import {esc, full, si, svgEl} from "./util.js";

/**
 * `sweep`: {ns: [N...], byN: Map(N → {chosen: key, costs: Map(key → total)} | {error})},
 * `series`: [{key, label, color}], `current`: the slider's N.
 */
export function renderSweep(container, sweep, series, current, onPick) {
  container.innerHTML = "";
  const W = 600, H = 270, L = 66, R = 14, T = 22, B = 62;
  const ns = sweep.ns;
  const pw = W - L - R, ph = H - T - B;
  let max = 0;
  for (const n of ns) {
    const e = sweep.byN.get(n);
    if (e && e.costs) for (const v of e.costs.values()) max = Math.max(max, v);
  }
  if (max <= 0) max = 1;
  // nice y max
  const mag = Math.pow(10, Math.floor(Math.log10(max)));
  const ymax = Math.ceil(max / mag * 2) / 2 * mag;
  const x = (n) => L + (ns.length > 1 ? (n - ns[0]) / (ns[ns.length - 1] - ns[0]) : 0.5) * pw;
  const y = (v) => T + ph - (v / ymax) * ph;
  const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, class: "sweep", role: "img", "aria-label": "cost against number of sites"});
  // grid + y labels
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    svgEl("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid"}, svg);
    const t = svgEl("text", {x: L - 6, y: y(v) + 4, class: "axis", "text-anchor": "end"}, svg);
    t.textContent = si(v);
  }
  const yl = svgEl("text", {x: 12, y: T + ph / 2, class: "axis-title", transform: `rotate(-90 12 ${T + ph / 2})`, "text-anchor": "middle"}, svg);
  yl.textContent = "plan cost";
  // x ticks
  for (const n of ns) {
    if (ns.length > 20 && n % 2 === 1 && n !== current) continue;
    const t = svgEl("text", {x: x(n), y: T + ph + 14, class: "axis" + (n === current ? " current" : ""), "text-anchor": "middle"}, svg);
    t.textContent = n;
  }
  const xl = svgEl("text", {x: L + pw / 2, y: H - 4, class: "axis-title", "text-anchor": "middle"}, svg);
  xl.textContent = "sites (N)";
  // current N
  if (ns.includes(current)) {
    svgEl("line", {x1: x(current), x2: x(current), y1: T - 6, y2: T + ph, class: "current-line"}, svg);
    const t = svgEl("text", {x: x(current), y: T - 9, class: "current-label", "text-anchor": "middle"}, svg);
    t.textContent = "N = " + current;
  }
  // flips
  const colorOf = new Map(series.map((s) => [s.key, s.color]));
  const labelOf = new Map(series.map((s) => [s.key, s.label]));
  let prev = null;
  const flips = [];
  for (const n of ns) {
    const e = sweep.byN.get(n);
    const c = e && e.chosen;
    if (c && prev && c !== prev.key) flips.push({n, from: prev.key, to: c, prevN: prev.n});
    if (c) prev = {key: c, n};
  }
  for (const f of flips) {
    const fx = (x(f.prevN) + x(f.n)) / 2;
    svgEl("line", {x1: fx, x2: fx, y1: T, y2: T + ph + 40, class: "flip-line"}, svg);
    const short = (labelOf.get(f.to) || "").match(/\(([A-Z]{2,})\b/);
    if (short) {
      const a = svgEl("text", {x: fx + 3, y: T + 10, class: "flip-label"}, svg);
      a.textContent = "→ " + short[1];
    }
    const t = svgEl("title", {}, svgEl("rect", {x: fx - 6, y: T, width: 12, height: ph, class: "hit"}, svg));
    t.textContent = `between ${f.prevN} and ${f.n} sites the choice flips:\n${labelOf.get(f.from) || f.from}\n→ ${labelOf.get(f.to) || f.to}`;
  }
  // lines
  for (const s of series) {
    let d = "";
    let pen = false;
    for (const n of ns) {
      const e = sweep.byN.get(n);
      const v = e && e.costs ? e.costs.get(s.key) : undefined;
      if (v === undefined) { pen = false; continue; }
      d += (pen ? " L" : " M") + x(n).toFixed(1) + "," + y(v).toFixed(1);
      pen = true;
    }
    if (d) svgEl("path", {d, class: "series", stroke: s.color, "data-key": s.key}, svg);
    for (const n of ns) {
      const e = sweep.byN.get(n);
      const v = e && e.costs ? e.costs.get(s.key) : undefined;
      if (v === undefined) continue;
      const chosen = e.chosen === s.key;
      const c = svgEl("circle", {cx: x(n), cy: y(v), r: chosen ? 4 : 2.6, fill: chosen ? s.color : "#fff", stroke: s.color, class: "pt"}, svg);
      const t = svgEl("title", {}, c);
      t.textContent = `${n} sites: ${s.label}\ncost ${full(v)}${chosen ? "\n(chosen)" : ""}`;
      c.addEventListener("click", () => onPick && onPick(n));
    }
  }
  // chosen strip
  const sy = T + ph + 24, sh = 10;
  const step = ns.length > 1 ? pw / (ns.length - 1) : pw;
  const lbl = svgEl("text", {x: L - step / 2 - 3, y: sy + 9, class: "axis", "text-anchor": "end"}, svg);
  lbl.textContent = "chosen";
  for (const n of ns) {
    const e = sweep.byN.get(n);
    const cx = x(n) - step / 2 + 1;
    const r = svgEl("rect", {x: cx, y: sy, width: Math.max(2, step - 2), height: sh, rx: 2,
      fill: e && e.chosen ? (colorOf.get(e.chosen) || "#999") : (e && e.error ? "#f5c2be" : "#eceef1"), class: "strip"}, svg);
    const t = svgEl("title", {}, r);
    t.textContent = e ? (e.error ? `${n} sites: ${e.error}` : `${n} sites: ${labelOf.get(e.chosen) || e.chosen}`) : `${n} sites: optimizing…`;
    r.addEventListener("click", () => onPick && onPick(n));
  }
  container.appendChild(svg);
  // legend
  const used = new Set();
  for (const n of ns) { const e = sweep.byN.get(n); if (e && e.chosen) used.add(e.chosen); }
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.innerHTML = series.map((s) =>
    `<span class="${used.has(s.key) ? "won" : ""}" title="${esc(s.label)}"><i style="background:${s.color}"></i>${esc(s.label)}${used.has(s.key) ? " <b>★</b>" : ""}</span>`).join("");
  container.appendChild(legend);
  const note = document.createElement("div");
  note.className = "muted small";
  const flipText = flips.map((f) => `${f.prevN}→${f.n}`).join(", ");
  note.innerHTML = (flips.length ? `The choice flips between ${esc(flipText)} sites (dashed). ` : "The same alternative wins at every site count shown. ") +
    "★ = chosen somewhere in the range. Click a point to optimize for that many sites.";
  container.appendChild(note);
  return {flips};
}
