// One plan as a DAG: laid out with dagre (vendored, global `dagre`), drawn as SVG.
// Each operator shows its output frontier, the floats it moves, its flops and
// a bar for its share of the plan's cost; the most expensive one is highlighted.

import {clip, dims, kernelText, operandsOf, si, full, svgEl} from "./util.js";

const NODE_W = 168;
const OP_H = 92;
const INPUT_H = 54;
const EXCHANGE = new Set(["broadcast", "shuffle"]);

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

function placementText(p) {
  if (p === undefined || p === null) return "any";
  if (typeof p === "string") return p;
  if (p.hash) return "hash[" + p.hash.join(",") + "]";
  return JSON.stringify(p);
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
    const full = s;
    while (s.length > 4 && t.getComputedTextLength() > max) {
      s = s.slice(0, -2);
      t.textContent = s + "…";
    }
    if (!t.querySelector("title")) {
      const tt = svgEl("title", {}, t);
      tt.textContent = full;
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

/**
 * Draw `plan` (with its per-node `report`) into `container`; returns the SVG.
 * `planTotal` is the plan's cost total (for the share bars).
 */
export function renderDag(container, plan, report, {planTotal = 0, onNode = null} = {}) {
  if (typeof dagre === "undefined") {
    container.textContent = "The layout library (web/vendor/dagre.min.js) did not load.";
    return null;
  }
  const g = new dagre.graphlib.Graph();
  g.setGraph({rankdir: "TB", nodesep: 14, ranksep: 30, marginx: 4, marginy: 14});
  g.setDefaultEdgeLabel(() => ({}));
  const inputs = plan.inputs || {};
  const nodes = plan.nodes || {};
  for (const name of Object.keys(inputs)) g.setNode(name, {width: NODE_W, height: INPUT_H, kind: "input"});
  for (const name of Object.keys(nodes)) g.setNode(name, {width: NODE_W, height: OP_H, kind: "op"});
  for (const [name, node] of Object.entries(nodes)) {
    for (const src of operandsOf(node)) {
      if (g.hasNode(src)) g.setEdge(src, name);
    }
  }
  dagre.layout(g);
  const gw = Math.ceil(g.graph().width || NODE_W), gh = Math.ceil(g.graph().height || OP_H);
  const svg = svgEl("svg", {viewBox: `0 0 ${gw} ${gh}`, class: "dag", role: "img",
    "aria-label": "plan DAG with " + Object.keys(nodes).length + " operators"});
  svg.style.maxWidth = gw + "px";
  svg.style.minWidth = Math.round(gw * 0.86) + "px";
  const mid = "arrow" + (++markerSeq);
  const defs = svgEl("defs", {}, svg);
  const marker = svgEl("marker", {id: mid, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"}, defs);
  svgEl("path", {d: "M0,0 L10,5 L0,10 z", class: "arrowhead"}, marker);

  const hot = mostExpensive(plan, report);
  const outputs = new Set(plan.outputs || []);
  for (const e of g.edges()) {
    const ed = g.edge(e);
    const hotEdge = EXCHANGE.has(nodes[e.w]?.op);
    svgEl("path", {d: edgePath(ed.points || []), class: "edge" + (hotEdge ? " into-exchange" : ""), "marker-end": `url(#${mid})`}, svg);
  }
  for (const name of g.nodes()) {
    const n = g.node(name);
    const x0 = n.x - n.width / 2, y0 = n.y - n.height / 2;
    const grp = svgEl("g", {transform: `translate(${x0},${y0})`, "data-node": name}, svg);
    if (n.kind === "input") {
      const inp = inputs[name];
      grp.setAttribute("class", "dnode input");
      svgEl("rect", {width: n.width, height: n.height, rx: 14, class: "box"}, grp);
      text(grp, 10, 18, name, "title");
      text(grp, n.width - 10, 18, "input", "tag", "end");
      text(grp, 10, 33, dims(inp.key_bounds) + " keys of " + dims(inp.array_bounds), "frontier", null, n.width - 18);
      text(grp, 10, 46, "placement " + placementText(inp.placement), "muted", null, n.width - 18);
      const t = svgEl("title", {}, grp);
      t.textContent = `input ${name}\nkey bounds ${JSON.stringify(inp.key_bounds)}\narray bounds ${JSON.stringify(inp.array_bounds)}\nplacement ${placementText(inp.placement)}`;
      continue;
    }
    const node = nodes[name];
    const r = report?.[name] || {};
    const isHot = hot.has(name);
    const exch = EXCHANGE.has(node.op);
    const share = planTotal > 0 ? (Number(r.total) || 0) / planTotal : 0;
    grp.setAttribute("class", "dnode op" + (exch ? " exchange" : "") + (isHot ? " hot" : "") + (outputs.has(name) ? " output" : ""));
    grp.setAttribute("data-total", r.total ?? "");
    svgEl("rect", {width: n.width, height: n.height, rx: 6, class: "box"}, grp);
    svgEl("rect", {width: 4, height: n.height, rx: 2, class: "stripe"}, grp);
    const k = kernelText(node.kernel);
    const nameW = Math.min(60, 8 + 6.5 * name.length);
    text(grp, 11, 16, node.op, "title", null, n.width - 22 - nameW);
    text(grp, n.width - 8, 16, clip(name, 9), "name", "end");
    text(grp, 11, 30, (k ? k + " · " : "") + paramText(node), "params", null, n.width - 19);
    text(grp, 11, 44, dims(r.key_bounds) + " keys · " + full(r.tuples) + " tuples", "frontier", null, n.width - 19);
    text(grp, 11, 57, dims(r.array_bounds) + " blocks · " + (r.placement ?? "?"), "muted", null, n.width - 19);
    const moved = Number(r.network_floats) || 0;
    text(grp, 11, 71, (moved ? "⇄ " + si(moved) + " floats" : "no transfer") + " · " + si(r.flops) + " flops", moved ? "metric moved" : "metric", null, n.width - 19);
    // cost-share bar
    const bw = n.width - 54;
    svgEl("rect", {x: 11, y: 78, width: bw, height: 7, rx: 3, class: "bar-bg"}, grp);
    if (share > 0) svgEl("rect", {x: 11, y: 78, width: Math.max(2, bw * Math.min(1, share)), height: 7, rx: 3, class: "bar"}, grp);
    text(grp, n.width - 8, 85, planTotal > 0 ? Math.round(share * 100) + "%" : "–", "share", "end");
    if (isHot) {
      text(grp, n.width / 2, -4, "▲ most expensive", "hot-tag", "middle");
    }
    const t = svgEl("title", {}, grp);
    t.textContent = `${name}: ${node.op}${k ? " " + k : ""}\n${paramText(node)}\n` +
      `output: key bounds ${JSON.stringify(r.key_bounds)}, array bounds ${JSON.stringify(r.array_bounds)}, ${full(r.tuples)} tuples, placement ${r.placement}\n` +
      `floats moved ${full(r.network_floats)}\nflops ${full(r.flops)}\ncost ${full(r.total)} (${(share * 100).toFixed(1)}% of the plan)`;
    if (onNode) grp.addEventListener("click", () => onNode(name));
  }
  container.appendChild(svg);
  fitTexts(svg);
  return svg;
}
