// One plan as a DAG: laid out with dagre (vendored, global `dagre`), drawn as
// SVG in a view that zooms to fit, pans and zooms, collapses the operators
// that only feed one operator, and shows an operator's details on click.
// Each box shows the operator's output frontier, placement, the floats it
// moves, its flops and a bar for its share of the plan's cost.

import {clip, dims, esc, full, kernelText, operandsOf, si, svgEl} from "./util.js";

const NODE_W = 184;
const OP_H = 104;
const INPUT_H = 56;
const EXTRA_LINE = 15;
const EXCHANGE = new Set(["broadcast", "shuffle"]);
/** Bytes per float as the bundled executor stores blocks (f64). */
export const BYTES_PER_FLOAT = 8;

let markerSeq = 0;

/** One-line summary of an operator's parameters. */
export function paramText(node) {
  switch (node.op) {
    case "shuffle": return "hash on dims [" + (node.dims || []).join(",") + "]";
    case "broadcast": return "copy to every site";
    case "local_join": case "join":
      return "L[" + (node.left_keys || []).join(",") + "] = R[" + (node.right_keys || []).join(",") + "]";
    case "local_aggregate": case "aggregate": return "group by [" + (node.group_by || []).join(",") + "]";
    case "local_filter": case "filter": return node.predicate || "";
    case "local_map": case "rekey": return node.key ? "key " + node.key : "same key";
    case "tile": return "dim " + node.dim + " size " + node.size;
    case "concat": return "key dim " + node.key_dim + " → array dim " + node.array_dim;
    default: {
      const skip = new Set(["op", "input", "left", "right", "kernel"]);
      return Object.entries(node).filter(([k]) => !skip.has(k)).map(([k, v]) => k + "=" + JSON.stringify(v)).join(" ");
    }
  }
}

export function placementText(p) {
  if (p === undefined || p === null) return "any";
  if (typeof p === "string") return p;
  if (p.hash) return "hash[" + p.hash.join(", ") + "]";
  return JSON.stringify(p);
}

/** Bytes, readable: 512 MB. */
export function bytes(n) {
  return si(n).replace(/ ?([kMGTP]?)$/, (_, u) => " " + (u || "") + "B").replace(/^(\d+) B$/, "$1 bytes");
}

/** The nodes of a plan with the most cost (ties all count); empty when all cost 0. */
export function mostExpensive(plan, report) {
  let max = 0;
  for (const name of Object.keys(plan.nodes || {})) max = Math.max(max, Number(report?.[name]?.total) || 0);
  if (max <= 0) return new Set();
  return new Set(Object.keys(plan.nodes).filter((n) => (Number(report?.[n]?.total) || 0) === max));
}

function text(parent, x, y, s, cls, anchor, maxWidth) {
  const t = svgEl("text", {x, y, class: cls, "text-anchor": anchor}, parent);
  t.textContent = s;
  if (maxWidth) t.dataset.fit = String(maxWidth);
  return t;
}

/** Shorten every text marked with data-fit until it fits its width (needs the SVG in the document). */
function fitTexts(svg) {
  for (const t of svg.querySelectorAll("text[data-fit]")) {
    const max = Number(t.dataset.fit);
    let s = t.textContent;
    if (!t.getComputedTextLength || t.getComputedTextLength() <= max) continue;
    const whole = s;
    while (s.length > 4 && t.getComputedTextLength() > max) {
      s = s.slice(0, -2);
      t.textContent = s + "…";
    }
    if (!t.querySelector("title")) {
      const tt = svgEl("title", {}, t);
      tt.textContent = whole;
    }
  }
}

function edgePath(points) {
  if (points.length < 2) return "";
  const p = points;
  let d = "M" + p[0].x + "," + p[0].y;
  if (p.length === 2) return d + " L" + p[1].x + "," + p[1].y;
  for (let i = 1; i < p.length - 1; i++) {
    const mx = (p[i].x + p[i + 1].x) / 2, my = (p[i].y + p[i + 1].y) / 2;
    d += " Q" + p[i].x + "," + p[i].y + " " + (i === p.length - 2 ? p[i + 1].x + "," + p[i + 1].y : mx + "," + my);
  }
  return d;
}

/** Consumers of every node and input of a plan. */
function consumersOf(plan) {
  const out = new Map();
  for (const n of [...Object.keys(plan.inputs || {}), ...Object.keys(plan.nodes || {})]) out.set(n, []);
  for (const [name, node] of Object.entries(plan.nodes || {})) {
    for (const src of operandsOf(node)) if (out.has(src)) out.get(src).push(name);
  }
  return out;
}

/**
 * The operators and inputs hidden when the nodes of `collapsed` are
 * collapsed: everything upstream of a collapsed node whose every consumer is
 * hidden or collapsed (what only feeds it). Outputs are never hidden.
 */
export function hiddenBy(plan, collapsed) {
  const consumers = consumersOf(plan);
  const outputs = new Set(plan.outputs || []);
  const upstream = new Set();
  const stack = [...collapsed];
  while (stack.length) {
    const n = stack.pop();
    const node = plan.nodes?.[n];
    if (!node) continue;
    for (const src of operandsOf(node)) if (!upstream.has(src)) { upstream.add(src); stack.push(src); }
  }
  const hidden = new Set();
  let changed = true;
  while (changed) {
    changed = false;
    for (const u of upstream) {
      if (hidden.has(u) || collapsed.has(u) || outputs.has(u)) continue;
      if (consumers.get(u).every((c) => hidden.has(c) || collapsed.has(c))) { hidden.add(u); changed = true; }
    }
  }
  return hidden;
}

/**
 * A plan drawn as a DAG in `container`. Options: `planTotal` (the plan's cost
 * total, for the share bars), `builtBy` (operator → rule), `rules` (rule name →
 * {family, equation}), `maxHeight` of the view, `wheelZooms` (zoom on a plain
 * wheel; otherwise Ctrl/⌘+wheel), `onEnlarge` (a ⤢ button that calls it).
 */
export class DagView {
  constructor(container, plan, report, opts = {}) {
    this.container = container;
    this.plan = plan;
    this.report = report || {};
    this.opts = {planTotal: 0, builtBy: {}, rules: new Map(), maxHeight: 640, wheelZooms: false, ...opts};
    this.collapsed = new Set();
    this.selected = null;
    this.fitted = true;
    this.t = {x: 0, y: 0, s: 1};
    if (typeof dagre === "undefined") {
      container.textContent = "The layout library (web/vendor/dagre.min.js) did not load.";
      return;
    }
    container.classList.add("dag-box");
    container.innerHTML = `
      <div class="dag-tools">
        <button type="button" class="tool dag-fit" data-act="fit" title="Zoom to fit the whole plan">Fit</button>
        <button type="button" class="tool" data-act="out" title="Zoom out">−</button>
        <button type="button" class="tool" data-act="in" title="Zoom in">+</button>
        <button type="button" class="tool" data-act="one" title="Actual size">1:1</button>
        <button type="button" class="tool dag-dir" data-act="dir" title="Layout: top-down (↓) or left to right (→); click to switch"></button>
        <button type="button" class="tool dag-expand-all hidden" data-act="expand" title="Show every operator again">Expand all</button>
        ${opts.onEnlarge ? `<button type="button" class="tool" data-act="enlarge" title="Open this plan in a large view">⤢</button>` : ""}
        <span class="dag-zoom muted small"></span>
      </div>
      <div class="dag-view" tabindex="0" aria-label="plan DAG: drag to pan, ${this.opts.wheelZooms ? "wheel" : "Ctrl+wheel"} to zoom"></div>
      <div class="muted small dag-hint">Drag to pan · ${this.opts.wheelZooms ? "wheel" : "Ctrl+wheel"} to zoom · click a box for its details</div>
      <div class="dag-details hidden"></div>`;
    this.view = container.querySelector(".dag-view");
    this.details = container.querySelector(".dag-details");
    container.querySelector(".dag-tools").addEventListener("click", (e) => {
      const act = e.target.closest("button")?.dataset.act;
      if (act === "fit") this.fit();
      else if (act === "in") this.zoomBy(1.25);
      else if (act === "out") this.zoomBy(0.8);
      else if (act === "one") this.zoomTo(1);
      else if (act === "expand") { this.collapsed.clear(); this.draw(); }
      else if (act === "dir") { this.dir = this.rankdir === "TB" ? "LR" : "TB"; this.fitted = true; this.draw(); }
      else if (act === "enlarge") this.opts.onEnlarge();
    });
    this.details.addEventListener("click", (e) => {
      const b = e.target.closest("[data-select],[data-collapse],[data-expand]");
      if (!b) return;
      e.preventDefault();
      if (b.dataset.select !== undefined) this.select(b.dataset.select || null, {reveal: true});
      else if (b.dataset.collapse) this.toggleCollapse(b.dataset.collapse, true);
      else if (b.dataset.expand) this.toggleCollapse(b.dataset.expand, false);
    });
    this.panning();
    this.draw();
    if (typeof ResizeObserver !== "undefined") {
      let w = this.view.clientWidth;
      this.resize = new ResizeObserver(() => {
        if (Math.abs(this.view.clientWidth - w) < 2) return;
        w = this.view.clientWidth;
        if (!this.dir) this.draw(); // the better layout direction may change with the width
        else {
          this.sizeView();
          if (this.fitted) this.fit();
        }
      });
      this.resize.observe(this.view);
    }
  }

  /** Lay out the visible nodes and draw them. */
  draw() {
    const plan = this.plan, report = this.report;
    const hidden = hiddenBy(plan, this.collapsed);
    this.hidden = hidden;
    const inputs = plan.inputs || {};
    const nodes = plan.nodes || {};
    const hot = mostExpensive(plan, report);
    const hiddenUnder = (name) => hiddenBy(plan, new Set([name])).size;
    const layout = (rankdir) => {
      const g = new dagre.graphlib.Graph();
      g.setGraph({rankdir, nodesep: 16, ranksep: rankdir === "TB" ? 34 : 40, marginx: 8, marginy: 8});
      g.setDefaultEdgeLabel(() => ({}));
      for (const name of Object.keys(inputs)) if (!hidden.has(name)) g.setNode(name, {width: NODE_W, height: INPUT_H, kind: "input"});
      for (const name of Object.keys(nodes)) {
        if (hidden.has(name)) continue;
        const h = OP_H + (hot.has(name) ? EXTRA_LINE : 0) + (this.collapsed.has(name) ? EXTRA_LINE : 0);
        g.setNode(name, {width: NODE_W, height: h, kind: "op"});
      }
      for (const [name, node] of Object.entries(nodes)) {
        if (hidden.has(name)) continue;
        for (const src of operandsOf(node)) if (g.hasNode(src)) g.setEdge(src, name);
      }
      dagre.layout(g);
      return g;
    };
    // Top-down unless left-to-right shows the plan larger in this view (a
    // long plan in a wide view); the Layout button overrides.
    let g = layout(this.dir || "TB");
    if (!this.dir) {
      const vw = this.view.clientWidth || 400;
      const scale = (x) => Math.min(1, vw / (x.graph().width || 1), this.opts.maxHeight / (x.graph().height || 1));
      const lr = layout("LR");
      if (scale(lr) > 1.25 * scale(g)) g = lr;
    }
    this.rankdir = g.graph().rankdir;
    this.gw = Math.ceil(g.graph().width || NODE_W);
    this.gh = Math.ceil(g.graph().height || OP_H);
    this.view.innerHTML = "";
    const svg = svgEl("svg", {class: "dag", role: "img", width: "100%", height: "100%",
      "aria-label": "plan DAG with " + Object.keys(nodes).length + " operators"});
    this.svg = svg;
    const mid = "arrow" + (++markerSeq);
    const defs = svgEl("defs", {}, svg);
    const marker = svgEl("marker", {id: mid, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"}, defs);
    svgEl("path", {d: "M0,0 L10,5 L0,10 z", class: "arrowhead"}, marker);
    const vp = svgEl("g", {class: "vp"}, svg);
    this.vp = vp;
    const outputs = new Set(plan.outputs || []);
    const planTotal = this.opts.planTotal;
    for (const e of g.edges()) {
      const ed = g.edge(e);
      const into = EXCHANGE.has(nodes[e.w]?.op);
      svgEl("path", {d: edgePath(ed.points || []), class: "edge" + (into ? " into-exchange" : ""), "marker-end": `url(#${mid})`}, vp);
    }
    for (const name of g.nodes()) {
      const n = g.node(name);
      const x0 = n.x - n.width / 2, y0 = n.y - n.height / 2;
      const grp = svgEl("g", {transform: `translate(${x0},${y0})`, "data-node": name}, vp);
      const w = n.width;
      if (n.kind === "input") {
        const inp = inputs[name];
        grp.setAttribute("class", "dnode input" + (this.selected === name ? " selected" : ""));
        svgEl("rect", {width: w, height: n.height, rx: 14, class: "box"}, grp);
        text(grp, 12, 18, name, "title", null, w - 60);
        text(grp, w - 12, 18, "input", "tag", "end");
        text(grp, 12, 33, dims(inp.key_bounds) + " keys of " + dims(inp.array_bounds), "frontier", null, w - 22);
        text(grp, 12, 47, "placement " + placementText(inp.placement), "muted", null, w - 22);
        const t = svgEl("title", {}, grp);
        t.textContent = `input ${name}: key bounds ${dims(inp.key_bounds)}, blocks ${dims(inp.array_bounds)}, placement ${placementText(inp.placement)}\n(click for details)`;
        grp.addEventListener("click", (ev) => this.clicked(ev, name));
        continue;
      }
      const node = nodes[name];
      const r = report[name] || {};
      const isHot = hot.has(name);
      const share = planTotal > 0 ? (Number(r.total) || 0) / planTotal : 0;
      grp.setAttribute("class", "dnode op" + (EXCHANGE.has(node.op) ? " exchange" : "") + (isHot ? " hot" : "") +
        (outputs.has(name) ? " output" : "") + (this.selected === name ? " selected" : "") + (this.collapsed.has(name) ? " collapsed" : ""));
      grp.setAttribute("data-total", r.total ?? "");
      svgEl("rect", {width: w, height: n.height, rx: 6, class: "box"}, grp);
      svgEl("rect", {width: 4, height: n.height, rx: 2, class: "stripe"}, grp);
      const k = kernelText(node.kernel);
      const nameW = Math.min(64, 10 + 6.5 * name.length);
      text(grp, 11, 16, node.op, "title", null, w - 24 - nameW);
      text(grp, w - 8, 16, clip(name, 10), "name", "end");
      text(grp, 11, 30, (k ? k + " · " : "") + paramText(node), "params", null, w - 19);
      text(grp, 11, 44, dims(r.key_bounds) + " keys · " + full(r.tuples) + " tuples", "frontier", null, w - 19);
      text(grp, 11, 57, dims(r.array_bounds) + " blocks", "frontier", null, w - 19);
      text(grp, 11, 70, "placement " + (r.placement ?? "?"), "muted placement", null, w - 19);
      const moved = Number(r.network_floats) || 0;
      text(grp, 11, 84, (moved ? "⇄ " + si(moved) + " floats" : "no transfer") + " · " + si(r.flops) + " flops", moved ? "metric moved" : "metric", null, w - 19);
      const bw = w - 56;
      svgEl("rect", {x: 11, y: 91, width: bw, height: 7, rx: 3, class: "bar-bg"}, grp);
      if (share > 0) svgEl("rect", {x: 11, y: 91, width: Math.max(2, bw * Math.min(1, share)), height: 7, rx: 3, class: "bar"}, grp);
      text(grp, w - 8, 98, planTotal > 0 ? Math.round(share * 100) + "%" : "–", "share", "end");
      let y = OP_H;
      if (isHot) {
        text(grp, 11, y + 6, "▲ most expensive operator", "hot-tag");
        y += EXTRA_LINE;
      }
      if (this.collapsed.has(name)) {
        const c = text(grp, 11, y + 6, `⊞ ${hiddenUnder(name)} hidden above — expand`, "collapsed-tag");
        c.addEventListener("click", (ev) => { ev.stopPropagation(); this.toggleCollapse(name, false); });
      }
      const t = svgEl("title", {}, grp);
      t.textContent = `${name}: ${node.op}${k ? " " + k : ""} — ${paramText(node)}\n` +
        `output ${dims(r.key_bounds)} keys of ${dims(r.array_bounds)}, ${full(r.tuples)} tuples, placement ${r.placement}\n` +
        `moves ${full(r.network_floats)} floats, ${full(r.flops)} flops, cost ${full(r.total)} (${(share * 100).toFixed(1)}% of the plan)\n(click for details)`;
      grp.addEventListener("click", (ev) => this.clicked(ev, name));
    }
    this.view.appendChild(svg);
    fitTexts(svg);
    this.sizeView();
    this.container.querySelector(".dag-expand-all").classList.toggle("hidden", this.collapsed.size === 0);
    this.container.querySelector(".dag-dir").textContent = this.rankdir === "TB" ? "↓" : "→";
    this.container.dataset.rankdir = this.rankdir;
    this.container.dataset.operators = String(Object.keys(nodes).length - [...hidden].filter((h) => h in nodes).length);
    if (this.fitted) this.fit(); else this.apply();
    if (this.selected) this.showDetails(this.selected);
  }

  /** The view's height: the plan at a scale that fits its width, at most maxHeight. */
  sizeView() {
    const vw = this.view.clientWidth || 400;
    const s = Math.min(1, vw / this.gw);
    const h = Math.max(140, Math.min(this.opts.maxHeight, Math.ceil(this.gh * s) + 4));
    this.view.style.height = h + "px";
  }

  apply() {
    const {x, y, s} = this.t;
    this.vp.setAttribute("transform", `translate(${x.toFixed(2)},${y.toFixed(2)}) scale(${s.toFixed(4)})`);
    this.view.dataset.scale = s.toFixed(4);
    this.view.dataset.fitted = this.fitted ? "1" : "0";
    this.container.querySelector(".dag-zoom").textContent = Math.round(s * 100) + "%";
  }

  /** Zoom so that the whole plan is visible, centred (never above 100%). */
  fit() {
    const vw = this.view.clientWidth || 400, vh = this.view.clientHeight || 300;
    const s = Math.min(1, (vw - 4) / this.gw, (vh - 4) / this.gh);
    this.t = {s, x: (vw - this.gw * s) / 2, y: (vh - this.gh * s) / 2};
    this.fitted = true;
    this.apply();
  }

  zoomTo(s, cx, cy) {
    const vw = this.view.clientWidth, vh = this.view.clientHeight;
    cx = cx ?? vw / 2;
    cy = cy ?? vh / 2;
    s = Math.max(0.05, Math.min(4, s));
    const k = s / this.t.s;
    this.t = {s, x: cx - (cx - this.t.x) * k, y: cy - (cy - this.t.y) * k};
    this.fitted = false;
    this.apply();
  }

  zoomBy(f, cx, cy) {
    this.zoomTo(this.t.s * f, cx, cy);
  }

  panning() {
    const v = this.view;
    let drag = null;
    v.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      drag = {x: e.clientX, y: e.clientY, tx: this.t.x, ty: this.t.y, moved: false, id: e.pointerId};
    });
    v.addEventListener("pointermove", (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!drag.moved && Math.hypot(dx, dy) < 4) return;
      if (!drag.moved) { drag.moved = true; v.setPointerCapture(drag.id); v.classList.add("panning"); }
      this.t = {...this.t, x: drag.tx + dx, y: drag.ty + dy};
      this.fitted = false;
      this.apply();
    });
    const end = () => {
      if (drag?.moved) {
        this.suppressClick = true;
        setTimeout(() => { this.suppressClick = false; }, 0);
      }
      drag = null;
      v.classList.remove("panning");
    };
    v.addEventListener("pointerup", end);
    v.addEventListener("pointercancel", end);
    v.addEventListener("wheel", (e) => {
      if (!this.opts.wheelZooms && !e.ctrlKey && !e.metaKey) return;
      e.preventDefault();
      const r = v.getBoundingClientRect();
      this.zoomBy(Math.exp(-e.deltaY / 300), e.clientX - r.left, e.clientY - r.top);
    }, {passive: false});
    v.addEventListener("keydown", (e) => {
      const step = 40;
      const moves = {ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step]};
      if (moves[e.key]) {
        e.preventDefault();
        this.t = {...this.t, x: this.t.x + moves[e.key][0], y: this.t.y + moves[e.key][1]};
        this.fitted = false;
        this.apply();
      } else if (e.key === "+" || e.key === "=") this.zoomBy(1.25);
      else if (e.key === "-") this.zoomBy(0.8);
      else if (e.key === "0" || e.key === "f") this.fit();
    });
  }

  clicked(ev, name) {
    ev.stopPropagation();
    if (this.suppressClick) return;
    this.select(this.selected === name ? null : name);
  }

  /** Select an operator or input (null: none) and show its details. */
  select(name, {reveal = false} = {}) {
    if (name && this.hidden?.has(name)) {
      // reveal it: expand the collapsed operators that hide it
      for (const c of [...this.collapsed]) {
        if (hiddenBy(this.plan, new Set([c])).has(name)) this.collapsed.delete(c);
      }
      this.selected = name;
      this.draw();
    }
    this.selected = name;
    for (const g of this.svg.querySelectorAll("g.dnode")) g.classList.toggle("selected", g.dataset.node === name);
    if (name && reveal) this.reveal(name);
    this.showDetails(name);
  }

  /** Pan so that a node is in view. */
  reveal(name) {
    const g = this.svg.querySelector(`g.dnode[data-node="${CSS.escape(name)}"]`);
    if (!g) return;
    const vr = this.view.getBoundingClientRect(), r = g.getBoundingClientRect();
    if (r.left >= vr.left && r.right <= vr.right && r.top >= vr.top && r.bottom <= vr.bottom) return;
    this.t = {...this.t, x: this.t.x + (vr.left + vr.width / 2) - (r.left + r.width / 2), y: this.t.y + (vr.top + vr.height / 2) - (r.top + r.height / 2)};
    this.fitted = false;
    this.apply();
  }

  toggleCollapse(name, on) {
    if (on) this.collapsed.add(name); else this.collapsed.delete(name);
    if (this.selected && hiddenBy(this.plan, this.collapsed).has(this.selected)) this.selected = name;
    this.draw();
  }

  showDetails(name) {
    const d = this.details;
    if (!name) {
      d.classList.add("hidden");
      d.innerHTML = "";
      d.dataset.node = "";
      return;
    }
    d.classList.remove("hidden");
    d.dataset.node = name;
    const plan = this.plan;
    const consumers = consumersOf(plan).get(name) || [];
    const link = (n) => `<a href="#" data-select="${esc(n)}" class="mono">${esc(n)}</a> <span class="muted">(${esc(plan.nodes?.[n]?.op || "input")})</span>`;
    const usedBy = consumers.length ? consumers.map(link).join(", ") : (plan.outputs || []).includes(name) ? "— (an output)" : "—";
    const close = `<button type="button" class="tool details-close" data-select="" title="Close">×</button>`;
    if (plan.inputs && name in plan.inputs) {
      const inp = plan.inputs[name];
      const floats = (inp.key_bounds || []).reduce((a, b) => a * b, 1) * (inp.array_bounds || []).reduce((a, b) => a * b, 1);
      d.innerHTML = `${close}<div class="details-head"><b class="mono">${esc(name)}</b> <span class="muted">input</span></div>
        <dl>
          <dt>frontier</dt><dd>key bounds ${esc(dims(inp.key_bounds))} · blocks ${esc(dims(inp.array_bounds))}</dd>
          <dt>placement</dt><dd class="mono">${esc(placementText(inp.placement))}</dd>
          <dt>size</dt><dd>${full(floats)} floats = ${bytes(floats * BYTES_PER_FLOAT)}</dd>
          <dt>read by</dt><dd>${usedBy}</dd>
        </dl>`;
      return;
    }
    const node = plan.nodes[name];
    const r = this.report[name] || {};
    const k = kernelText(node.kernel);
    const blockFloats = (r.array_bounds || []).reduce((a, b) => a * b, 1);
    const outFloats = (Number(r.tuples) || 0) * blockFloats;
    const moved = Number(r.network_floats) || 0;
    const share = this.opts.planTotal > 0 ? (Number(r.total) || 0) / this.opts.planTotal : 0;
    const ruleName = this.opts.builtBy?.[name];
    const rule = ruleName ? this.opts.rules.get(ruleName) : null;
    const under = hiddenBy(plan, new Set([name]));
    const canCollapse = [...under].length > 0;
    d.innerHTML = `${close}<div class="details-head"><b class="mono">${esc(name)}</b> <b>${esc(node.op)}</b> <span class="mono muted">${esc(k ? k + " · " : "")}${esc(paramText(node))}</span></div>
      <dl>
        <dt>reads</dt><dd>${operandsOf(node).map(link).join(", ") || "—"}</dd>
        <dt>read by</dt><dd>${usedBy}</dd>
        <dt>output frontier</dt><dd>key bounds ${esc(dims(r.key_bounds))} · ${full(r.tuples)} tuples · blocks ${esc(dims(r.array_bounds))}</dd>
        <dt>placement</dt><dd class="mono">${esc(r.placement ?? "?")}</dd>
        <dt>output size</dt><dd>${full(outFloats)} floats = ${bytes(outFloats * BYTES_PER_FLOAT)}</dd>
        <dt>moves</dt><dd>${moved ? `${full(moved)} floats = ${bytes(moved * BYTES_PER_FLOAT)} over the network` : "nothing (runs where its operands are)"}</dd>
        <dt>flops</dt><dd>${full(r.flops)}</dd>
        <dt>cost</dt><dd>${full(r.total)} <span class="muted">(${(share * 100).toFixed(1)}% of the plan)</span></dd>
        <dt>built by</dt><dd>${ruleName ? `<span class="mono rule-ref">${esc(ruleName)}</span>${rule ? ` <span class="fam">${esc(rule.family)}</span><div class="eq mono">${esc(rule.equation)}</div>` : ""}` : "<span class='muted'>— (an output's alias)</span>"}</dd>
      </dl>
      <div class="muted small">Bytes at ${BYTES_PER_FLOAT} per float (f64, as the bundled executor stores blocks).</div>
      ${this.collapsed.has(name)
        ? `<button type="button" class="tool" data-expand="${esc(name)}">Expand the ${under.size} hidden above it</button>`
        : canCollapse ? `<button type="button" class="tool collapse-btn" data-collapse="${esc(name)}">Collapse the ${under.size} that only feed it</button>` : ""}`;
  }
}
