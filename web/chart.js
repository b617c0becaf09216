// The sites chart: each alternative's cost against the number of sites, the
// chosen alternative per site count as a strip under the axis, and a dashed
// line wherever the choice flips. Tied lines are drawn side by side (a few
// pixels apart, dashed) so none hides another, the chosen one on top; hovering
// a site count tells which plan wins there and why.

import {esc, si, svgEl} from "./util.js";
import {acronym, ratioText, sameTotal, tieBreak} from "./explain.js";

/** Tick step and top of a y axis from 0 to `max`: steps of 1, 2, 2.5 or 5 × 10^k. */
export function niceAxis(max, ticks = 4) {
  if (!(max > 0)) return {step: 1, top: ticks};
  const raw = max / ticks;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9));
  return {step, top: Math.ceil(max / step - 1e-9) * step};
}

const OFFSET = 3.2; // px between tied lines

/**
 * `sweep`: {ns: [N...], byN: Map(N → {chosen: key, order: [keys, best first],
 * costs: Map(key → cost), labels: Map(key → label)} | {error})},
 * `series`: [{key, label, color, tag}], `current`: the slider's N.
 */
export function renderSweep(container, sweep, series, current, onPick) {
  container.innerHTML = "";
  container.style.position = "relative";
  const W = 600, H = 292, L = 62, R = 16, T = 24, B = 66;
  const ns = sweep.ns;
  const pw = W - L - R, ph = H - T - B;
  let max = 0;
  for (const n of ns) {
    const e = sweep.byN.get(n);
    if (e && e.costs) for (const c of e.costs.values()) max = Math.max(max, Number(c.total));
  }
  const {step, top} = niceAxis(max);
  const x = (n) => L + (ns.length > 1 ? (n - ns[0]) / (ns[ns.length - 1] - ns[0]) : 0.5) * pw;
  const y = (v) => T + ph - (v / top) * ph;
  const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, class: "sweep", role: "img", "aria-label": "cost against number of sites"});
  for (let v = 0; v <= top + step / 2; v += step) {
    svgEl("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid"}, svg);
    const t = svgEl("text", {x: L - 6, y: y(v) + 4, class: "axis tick", "text-anchor": "end"}, svg);
    t.textContent = si(v);
  }
  const yl = svgEl("text", {x: 12, y: T + ph / 2, class: "axis-title", transform: `rotate(-90 12 ${T + ph / 2})`, "text-anchor": "middle"}, svg);
  yl.textContent = "plan cost";
  for (const n of ns) {
    if (ns.length > 20 && n % 2 === 1 && n !== current) continue;
    const t = svgEl("text", {x: x(n), y: T + ph + 14, class: "axis" + (n === current ? " current" : ""), "text-anchor": "middle"}, svg);
    t.textContent = n;
  }
  const xl = svgEl("text", {x: L + pw / 2, y: H - 4, class: "axis-title", "text-anchor": "middle"}, svg);
  xl.textContent = "sites (N)";
  if (ns.includes(current)) {
    svgEl("line", {x1: x(current), x2: x(current), y1: T - 6, y2: T + ph, class: "current-line"}, svg);
    const t = svgEl("text", {x: x(current), y: T - 10, class: "current-label", "text-anchor": "middle"}, svg);
    t.textContent = "N = " + current;
  }
  const byKey = new Map(series.map((s) => [s.key, s]));
  const nameOf = (k) => byKey.get(k)?.label || k;
  const shortOf = (k) => acronym(nameOf(k)) || byKey.get(k)?.tag || "?";

  // flips
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
    const a = svgEl("text", {x: fx + 3, y: T + 10, class: "flip-label"}, svg);
    a.textContent = "→ " + shortOf(f.to);
  }

  // Per site count, the series' vertical offsets: tied series fan out around
  // the one drawn on top (the chosen one, else the first in the optimizer's order).
  const topKey = sweep.byN.get(current)?.chosen;
  const drawOrder = [...series].sort((a, b) => (a.key === topKey) - (b.key === topKey));
  const offset = new Map(); // `${n}|${key}` → {dy, tied}
  for (const n of ns) {
    const e = sweep.byN.get(n);
    if (!e || !e.costs) continue;
    const keys = (e.order || [...e.costs.keys()]).filter((k) => e.costs.has(k));
    const done = new Set();
    for (const k of keys) {
      if (done.has(k)) continue;
      const group = keys.filter((o) => !done.has(o) && sameTotal(e.costs.get(o), e.costs.get(k)));
      // the chosen one (or the best ranked) stays on the line; the others alternate below and above
      group.sort((a, b) => (b === e.chosen) - (a === e.chosen) || keys.indexOf(a) - keys.indexOf(b));
      group.forEach((o, i) => {
        done.add(o);
        const dy = i === 0 ? 0 : (i % 2 ? 1 : -1) * Math.ceil(i / 2) * OFFSET;
        offset.set(`${n}|${o}`, {dy, tied: group.length > 1, top: i === 0});
      });
    }
  }
  const lines = svgEl("g", {class: "lines"}, svg);
  for (const s of drawOrder) {
    let solid = "", dashed = "";
    let last = null;
    for (const n of ns) {
      const e = sweep.byN.get(n);
      const c = e && e.costs ? e.costs.get(s.key) : undefined;
      if (c === undefined) { last = null; continue; }
      const o = offset.get(`${n}|${s.key}`) || {dy: 0, tied: false, top: true};
      const pt = {x: x(n), y: y(Number(c.total)) + o.dy, o};
      if (last) {
        const seg = ` M${last.x.toFixed(1)},${last.y.toFixed(1)} L${pt.x.toFixed(1)},${pt.y.toFixed(1)}`;
        if (last.o.tied && pt.o.tied && !(last.o.top && pt.o.top)) dashed += seg; else solid += seg;
      }
      last = pt;
    }
    if (solid) svgEl("path", {d: solid, class: "series", stroke: s.color, "data-key": s.key}, lines);
    if (dashed) svgEl("path", {d: dashed, class: "series tied", stroke: s.color, "data-key": s.key}, lines);
    if (!solid && !dashed) {
      // a single point: still a series
      svgEl("path", {d: "", class: "series", stroke: s.color, "data-key": s.key}, lines);
    }
  }
  // points: the chosen point of each site count last, so it is always on top
  const pts = svgEl("g", {class: "points"}, svg);
  const chosenPts = [];
  for (const s of drawOrder) {
    for (const n of ns) {
      const e = sweep.byN.get(n);
      const c = e && e.costs ? e.costs.get(s.key) : undefined;
      if (c === undefined) continue;
      const dy = offset.get(`${n}|${s.key}`)?.dy || 0;
      const p = {cx: x(n), cy: y(Number(c.total)) + dy, s, n};
      if (e.chosen === s.key) chosenPts.push(p); else svgEl("circle", {cx: p.cx, cy: p.cy, r: 2.6, fill: "#fff", stroke: s.color, class: "pt"}, pts);
    }
  }
  for (const p of chosenPts) svgEl("circle", {cx: p.cx, cy: p.cy, r: 4, fill: p.s.color, stroke: "#fff", "stroke-width": 1, class: "pt chosen-pt", "data-n": p.n}, pts);

  // chosen strip, with each series' letter
  const sy = T + ph + 24, sh = 13;
  const stepX = ns.length > 1 ? pw / (ns.length - 1) : pw;
  const lbl = svgEl("text", {x: L - stepX / 2 - 3, y: sy + 10, class: "axis", "text-anchor": "end"}, svg);
  lbl.textContent = "chosen";
  for (const n of ns) {
    const e = sweep.byN.get(n);
    const cx = x(n) - stepX / 2 + 1;
    const fill = e && e.chosen ? (byKey.get(e.chosen)?.color || "#999") : (e && e.error ? "#f5c2be" : "#eceef1");
    svgEl("rect", {x: cx, y: sy, width: Math.max(2, stepX - 2), height: sh, rx: 2, fill, class: "strip", "data-n": n}, svg);
    if (e && e.chosen && stepX >= 14) {
      const t = svgEl("text", {x: x(n), y: sy + 10, class: "strip-tag", "text-anchor": "middle"}, svg);
      t.textContent = byKey.get(e.chosen)?.tag || "";
    }
  }
  // hover columns (on top of everything): explain the choice at each site count
  const hover = svgEl("g", {class: "hover-cols"}, svg);
  const tip = document.createElement("div");
  tip.className = "chart-tip hidden";
  tip.setAttribute("role", "tooltip");
  for (const n of ns) {
    const col = svgEl("rect", {x: x(n) - stepX / 2, y: T - 4, width: stepX, height: ph + 4 + 24 + sh, class: "hover-col", "data-n": n}, hover);
    col.addEventListener("mouseenter", () => showTip(n));
    col.addEventListener("mouseleave", () => { tip.classList.add("hidden"); col.classList.remove("on"); });
    col.addEventListener("click", () => onPick && onPick(n));
  }
  function showTip(n) {
    hover.querySelectorAll(".hover-col.on").forEach((c) => c.classList.remove("on"));
    hover.querySelector(`.hover-col[data-n="${n}"]`)?.classList.add("on");
    tip.innerHTML = explainAt(sweep, n, flips, nameOf, byKey);
    tip.dataset.n = String(n);
    tip.classList.remove("hidden");
    const box = svg.getBoundingClientRect(), host = container.getBoundingClientRect();
    const px = box.left - host.left + (x(n) / W) * box.width;
    const left = px > box.width / 2 ? px - tip.offsetWidth - 14 : px + 14;
    tip.style.left = Math.max(0, left) + "px";
    tip.style.top = (box.top - host.top + 8) + "px";
  }
  container.appendChild(svg);
  container.appendChild(tip);

  // legend: the series' letters and labels
  const used = new Set();
  for (const n of ns) { const e = sweep.byN.get(n); if (e && e.chosen) used.add(e.chosen); }
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.innerHTML = series.map((s) =>
    `<span class="${used.has(s.key) ? "won" : ""}" data-key="${esc(s.key)}" title="${esc(s.label)}"><i style="background:${s.color}"></i><b class="tag" style="color:${s.color}">${esc(s.tag)}</b> ${esc(s.label)}${used.has(s.key) ? " ★" : ""}</span>`).join("");
  container.appendChild(legend);
  const note = document.createElement("div");
  note.className = "muted small";
  const flipText = flips.map((f) => `${f.prevN}→${f.n}`).join(", ");
  note.innerHTML = (flips.length ? `The choice flips between ${esc(flipText)} sites (dashed verticals). ` : "The same alternative wins at every site count shown. ") +
    "★ = chosen somewhere in the range; tied lines run side by side, dashed. <b>Hover a site count</b> to see which plan wins there and why; click to optimize for it.";
  container.appendChild(note);
  return {flips};
}

/** The tooltip of site count `n`: the winner, its nearest rival, ties, and why the choice flipped here. */
function explainAt(sweep, n, flips, nameOf, byKey) {
  const e = sweep.byN.get(n);
  const sw = (k) => `<i class="sw" style="background:${byKey.get(k)?.color || "#999"}"></i><b>${esc(byKey.get(k)?.tag || "")}</b> `;
  const nm = (k) => esc(e?.labels?.get(k) || nameOf(k));
  if (!e) return `<b>${n} sites</b>: optimizing…`;
  if (e.error) return `<b>${n} sites</b>: ${esc(e.error)}`;
  const order = (e.order || [...e.costs.keys()]).filter((k) => e.costs.has(k));
  const best = e.chosen;
  const bc = e.costs.get(best);
  let html = `<div class="tip-head">${n} site${n === 1 ? "" : "s"}</div>`;
  html += `<div>${sw(best)}${nm(best)} wins: cost <b>${si(bc.total)}</b></div>`;
  const rival = order.find((k) => k !== best);
  if (rival) {
    const rc = e.costs.get(rival);
    const tb = tieBreak(bc, rc);
    html += `<div>${sw(rival)}${nm(rival)}: ${si(rc.total)} (${esc(ratioText(rc, bc))}${tb ? "" : " the winner's"})</div>`;
    if (tb) html += `<div class="tip-tie">Tie at ${si(bc.total)}: the winner has ${esc(tb.short)}.</div>`;
  }
  const f = flips.find((x) => x.n === n) || flips.find((x) => x.prevN === n);
  if (f) {
    const a = sweep.byN.get(f.prevN), b = sweep.byN.get(f.n);
    const tag = (k) => esc(byKey.get(k)?.tag || "");
    const path = (k) => {
      const ca = a.costs.get(k), cb = b.costs.get(k);
      if (ca && cb) return `${tag(k)} costs ${si(ca.total)} → ${si(cb.total)}`;
      if (cb) return `${tag(k)} is not an alternative at ${f.prevN} site${f.prevN === 1 ? "" : "s"} (${si(cb.total)} at ${f.n})`;
      if (ca) return `${tag(k)} is not an alternative at ${f.n} sites (${si(ca.total)} at ${f.prevN})`;
      return `${tag(k)} —`;
    };
    html += `<div class="tip-flip">Between ${f.prevN} and ${f.n} sites the choice flips from ${sw(f.from)}to ${sw(f.to)}: ${path(f.from)}; ${path(f.to)}.`;
    const ta = a.costs.has(f.to) ? tieBreak(a.costs.get(f.from), a.costs.get(f.to)) : null;
    const tb = b.costs.has(f.from) ? tieBreak(b.costs.get(f.to), b.costs.get(f.from)) : null;
    if (ta) html += ` At ${f.prevN} they tie and ${tag(f.from)} has ${esc(ta.short)}.`;
    if (tb) html += ` At ${f.n} they tie and ${tag(f.to)} has ${esc(tb.short)}.`;
    html += `</div>`;
  }
  const others = order.filter((k) => k !== best && k !== rival);
  if (others.length) {
    html += `<div class="tip-rest">${others.slice(0, 6).map((k) => `${sw(k)}${si(e.costs.get(k).total)}`).join(" · ")}${others.length > 6 ? " …" : ""}</div>`;
  }
  return html;
}
