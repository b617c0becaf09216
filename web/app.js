// tra plan explorer: why did one plan beat another?
// Talks to GET /v1/examples, GET /v1/rules, POST /v1/optimize, POST /v1/execute.

import {esc, full, si, ms, dims, clip, pool, PALETTE} from "./util.js";
import {Editor, locate, offsetOf} from "./editor.js";
import {renderDag, mostExpensive, paramText} from "./dag.js";
import {renderSweep} from "./chart.js";

const $ = (id) => document.getElementById(id);
const editor = new Editor($("editor"));

const state = {
  examples: {},
  rules: new Map(),
  answer: null,        // the last successful optimize answer
  body: null,          // the request that produced it
  gen: 0,              // generation of the main optimize request
  sweepGen: 0,
  sweep: null,         // {key, ns, byN}
  colors: new Map(),   // series key → colour
  labels: new Map(),   // series key → display label
  colorKey: null,      // the program the colours belong to
};

/* ---------------- requests (cached) ---------------- */

const cache = new Map(); // request JSON → Promise<{ok, status, data}>

async function postJson(path, body) {
  let res;
  try {
    res = await fetch(path, {method: "POST", headers: {"content-type": "application/json"}, body: typeof body === "string" ? body : JSON.stringify(body)});
  } catch (e) {
    return {ok: false, status: 0, data: {error: {code: "network", message: "could not reach the server: " + e.message, at: ""}}};
  }
  let data;
  try {
    data = await res.json();
  } catch (_) {
    data = {error: {code: "http_" + res.status, message: res.statusText || "the server's answer is not JSON", at: ""}};
  }
  if (!res.ok && !data.error) data = {error: {code: "http_" + res.status, message: res.statusText, at: ""}};
  return {ok: res.ok && !data.error, status: res.status, data};
}

function optimizeCached(body) {
  const key = JSON.stringify(body);
  if (!cache.has(key)) {
    const p = postJson("/v1/optimize", key).then((r) => {
      if (!r.ok && (r.status === 0 || r.status >= 500)) cache.delete(key); // retry transient failures
      return r;
    });
    cache.set(key, p);
    if (cache.size > 400) cache.delete(cache.keys().next().value);
  }
  return cache.get(key);
}

/* ---------------- controls ---------------- */

function controls() {
  return {
    sites: Number($("sites").value),
    network_weight: Number($("alpha").value),
    compute_weight: Number($("beta").value),
  };
}

function setControls(cluster) {
  const c = cluster || {};
  const sites = Number.isFinite(c.sites) ? c.sites : 4;
  $("sites").max = String(Math.max(32, sites));
  $("sites").value = String(sites);
  $("sitesOut").textContent = String(sites);
  $("alpha").value = String(c.network_weight ?? 1);
  $("beta").value = String(c.compute_weight ?? 0);
}

/** The editor's program with the controls' cluster, or a client-side error. */
function requestFromEditor() {
  const text = editor.value;
  let program;
  try {
    program = JSON.parse(text);
  } catch (e) {
    const msg = String(e.message || e);
    let pos = null;
    const lc = msg.match(/line (\d+) column (\d+)/);
    const p = msg.match(/position (\d+)/);
    if (lc) pos = offsetOf(text, Number(lc[1]), Number(lc[2]));
    else if (p) pos = Number(p[1]);
    return {error: {code: "bad_json", message: "the program is not valid JSON: " + msg, at: "", pos}};
  }
  if (!program || typeof program !== "object" || Array.isArray(program)) {
    return {error: {code: "bad_json", message: "the program must be a JSON object with inputs, nodes and outputs", at: "", pos: 0}};
  }
  program.cluster = Object.assign({}, program.cluster || {}, controls());
  return {program};
}

/* ---------------- errors ---------------- */

function showError(err) {
  const box = $("error");
  document.querySelectorAll(".control.bad").forEach((e) => e.classList.remove("bad"));
  if (!err) {
    box.classList.add("hidden");
    box.innerHTML = "";
    editor.clear();
    $("staleNote").classList.add("hidden");
    return;
  }
  let where = "";
  let span = null;
  if (err.at) {
    span = locate(editor.value, err.at);
    const ctl = {"cluster.sites": "sites", "cluster.network_weight": "alpha", "cluster.compute_weight": "beta"}[err.at];
    if (ctl) $(ctl).closest(".control").classList.add("bad");
  } else if (Number.isFinite(err.pos)) {
    span = {start: err.pos, end: err.pos + 1, exact: true};
  }
  let line = null;
  if (span) line = editor.highlight(span.start, span.end);
  else editor.clear();
  if (err.at) {
    where = ` at <a href="#" id="errorAt" class="mono">${esc(err.at)}</a>` + (line ? ` <span class="muted">(line ${line}${span && !span.exact ? ", nearest match" : ""})</span>` : "");
  } else if (line) {
    where = ` <a href="#" id="errorAt">at line ${line}</a>`;
  }
  box.innerHTML = `<div class="error-head"><code>${esc(err.code || "error")}</code>${where}</div><div class="error-msg">${esc(err.message || "")}</div>`;
  box.classList.remove("hidden");
  box.dataset.at = err.at || "";
  const a = $("errorAt");
  if (a && span) a.addEventListener("click", (ev) => { ev.preventDefault(); editor.highlight(span.start, span.end, {focus: true}); });
  if (state.answer) $("staleNote").classList.remove("hidden");
}

/* ---------------- series (alternatives across site counts) ---------------- */

function seriesKey(alt) {
  return alt.label + "|" + JSON.stringify(alt.strategy || []);
}

function noteSeries(alts) {
  // assign colours in order of first appearance; disambiguate repeated labels
  for (const a of alts) {
    const k = seriesKey(a);
    if (!state.colors.has(k)) state.colors.set(k, PALETTE[state.colors.size % PALETTE.length]);
    if (!state.labels.has(k)) state.labels.set(k, a.label);
  }
  const byLabel = new Map();
  for (const k of state.colors.keys()) {
    const l = k.slice(0, k.indexOf("|"));
    byLabel.set(l, (byLabel.get(l) || 0) + 1);
  }
  for (const k of state.colors.keys()) {
    const i = k.indexOf("|");
    const l = k.slice(0, i);
    if (byLabel.get(l) > 1) {
      const strat = [...new Set(JSON.parse(k.slice(i + 1)))].join(", ");
      state.labels.set(k, l + (strat ? " (" + strat + ")" : ""));
    } else {
      state.labels.set(k, l);
    }
  }
}

function programKey(body) {
  const b = JSON.parse(JSON.stringify(body));
  if (b.cluster) delete b.cluster.sites;
  return JSON.stringify(b);
}

/* ---------------- optimize ---------------- */

let debounce = null;

function scheduleOptimize(delay = 120) {
  clearTimeout(debounce);
  debounce = setTimeout(() => optimize(), delay);
}

async function optimize() {
  const req = requestFromEditor();
  if (req.error) { showError(req.error); return; }
  const body = req.program;
  const gen = ++state.gen;
  document.body.dataset.busy = "1";
  $("busy").classList.remove("hidden");
  $("optimize").disabled = true;
  const r = await optimizeCached(body);
  if (gen !== state.gen) return; // a newer request superseded this one
  document.body.dataset.busy = "0";
  $("busy").classList.add("hidden");
  $("optimize").disabled = false;
  if (!r.ok) {
    showError(r.data.error);
    return;
  }
  showError(null);
  const pk = programKey(body);
  if (state.colorKey !== pk) {
    state.colorKey = pk;
    state.colors = new Map();
    state.labels = new Map();
  }
  state.answer = r.data;
  state.body = body;
  noteSeries(r.data.alternatives || []);
  render();
  document.body.dataset.sites = String(body.cluster.sites);
  document.body.dataset.optimized = String(gen);
  startSweep(body);
  resetRun();
}

/* ---------------- rendering the answer ---------------- */

function sortedAlternatives(answer) {
  const alts = (answer.alternatives || []).map((a, i) => ({...a, index: i}));
  alts.sort((a, b) => a.cost.total - b.cost.total || a.index - b.index);
  const planJson = JSON.stringify(answer.plan);
  let chosen = alts.findIndex((a) => JSON.stringify(a.plan) === planJson);
  if (chosen < 0) chosen = 0;
  return {alts, chosen};
}

/** What an operand is, for people: an input's name (through per-tuple local ops), or "n3 (join)". */
function origin(plan, name) {
  const seen = new Set();
  let cur = name;
  while (cur && !seen.has(cur)) {
    seen.add(cur);
    if (plan.inputs && cur in plan.inputs) return cur;
    const node = plan.nodes?.[cur];
    if (!node) return cur;
    if ((node.op === "local_map" || node.op === "local_filter") && typeof node.input === "string") { cur = node.input; continue; }
    return `${cur} (${node.op.replace(/^local_/, "")})`;
  }
  return name;
}

function exchanges(plan, report) {
  return Object.entries(plan.nodes || {})
    .filter(([n]) => (Number(report?.[n]?.network_floats) || 0) > 0)
    .map(([n, node]) => ({name: n, op: node.op, of: origin(plan, node.input ?? node.left ?? ""), floats: Number(report[n].network_floats)}));
}

function describeMoves(plan, report) {
  const ex = exchanges(plan, report);
  if (!ex.length) return "moves nothing";
  const parts = ex.map((e) => `${esc(e.op)} of <span class="mono">${esc(e.of)}</span> ${si(e.floats)}`);
  return "moves " + (parts.length > 4 ? parts.slice(0, 4).join(" + ") + ` + ${parts.length - 4} more` : parts.join(" + "));
}

function render() {
  const answer = state.answer;
  const body = state.body;
  const {alts, chosen} = sortedAlternatives(answer);
  const cl = body.cluster;
  const best = alts[chosen] || {cost: answer.cost, label: "chosen plan", plan: answer.plan, report: answer.report};
  const runner = alts.find((_, i) => i !== chosen);

  // summary: why the chosen plan won
  let why = `<div class="summary-main"><span class="badge chosen">✓ chosen</span> <b>${esc(best.label)}</b>
    — cost <b>${si(answer.cost.total)}</b> on ${cl.sites} site${cl.sites === 1 ? "" : "s"}
    <span class="muted">(${si(answer.cost.network_floats)} floats moved, ${si(answer.cost.flops)} flops; cost = ${cl.network_weight}·floats + ${cl.compute_weight}·flops)</span></div>`;
  if (runner) {
    const ratio = best.cost.total > 0 ? runner.cost.total / best.cost.total : null;
    why += `<div class="summary-why">It ${describeMoves(best.plan, best.report)}; the runner-up, <b>${esc(runner.label)}</b>, ${describeMoves(runner.plan, runner.report)}
      ${ratio !== null ? ` — <b>${ratio.toFixed(2)}×</b> the cost` : runner.cost.total > 0 ? "" : " — the same cost"}.</div>`;
  } else {
    why += `<div class="summary-why">The e-graph holds only one strategy for this program. It ${describeMoves(best.plan, best.report)}.</div>`;
  }
  $("summary").innerHTML = why;

  // alternatives side by side
  const wrap = $("alts");
  wrap.innerHTML = "";
  const maxTotal = Math.max(...alts.map((a) => a.cost.total), 0);
  alts.forEach((a, i) => {
    const key = seriesKey(a);
    const card = document.createElement("article");
    card.className = "alt-card" + (i === chosen ? " chosen" : "");
    card.dataset.rank = String(i + 1);
    card.dataset.label = a.label;
    const ratio = best.cost.total > 0 ? a.cost.total / best.cost.total : (a.cost.total > 0 ? Infinity : 1);
    const rel = i === chosen ? `<span class="badge chosen">✓ chosen</span>`
      : `<span class="ratio">${Number.isFinite(ratio) ? ratio.toFixed(2) + "×" : "more"} the chosen</span>`;
    const hot = [...mostExpensive(a.plan, a.report)];
    const strat = (a.strategy && a.strategy.length) ? [...new Set(a.strategy)].join(", ") : "";
    card.innerHTML = `
      <header class="alt-head">
        <span class="rank">#${i + 1}</span><i class="swatch" style="background:${state.colors.get(key) || "#999"}"></i>
        <span class="alt-label" title="${esc(a.label)}">${esc(a.label)}</span>
      </header>
      <div class="alt-cost" data-total="${a.cost.total}">
        <span class="cost-total" title="cost ${full(a.cost.total)}">${si(a.cost.total)}</span>
        <span class="muted small">cost</span>
        ${rel}
      </div>
      <div class="costbar" title="cost relative to the most expensive alternative"><i style="width:${maxTotal > 0 ? (100 * a.cost.total / maxTotal).toFixed(1) : 0}%"></i></div>
      <div class="alt-meta muted small"><b>${si(a.cost.network_floats)}</b> floats moved · ${si(a.cost.flops)} flops · ${Object.keys(a.plan.nodes || {}).length} operators${hot.length ? " · hottest <b class='mono'>" + esc(hot.join(", ")) + "</b>" : ""}${strat ? "<br>strategy: " + esc(strat) : ""}</div>
      <div class="dag-wrap"></div>`;
    wrap.appendChild(card);
    renderDag(card.querySelector(".dag-wrap"), a.plan, a.report, {planTotal: a.cost.total});
  });
  $("altCount").textContent = `${alts.length} alternative${alts.length === 1 ? "" : "s"}, cheapest first`;
  requestAnimationFrame(() => {
    if (wrap.scrollWidth > wrap.clientWidth + 4) $("altCount").textContent += " — scroll sideways for the rest →";
  });

  // rules and e-graph figures
  const rules = answer.rules_applied || [];
  $("rules").innerHTML = rules.length ? rules.map((name) => {
    const r = state.rules.get(name);
    return `<li><span class="rule-name mono">${esc(name)}</span>${r ? ` <span class="fam">${esc(r.family)}</span><div class="eq mono">${esc(r.equation)}</div><div class="cond muted small">${esc(r.condition)}</div>` : ""}</li>`;
  }).join("") : `<li class="muted">No rewrite rule fired: the plan is the direct lowering.</li>`;
  // A rule that failed was left out (the plan was found without it): say so first.
  const warnings = answer.warnings || [];
  if (warnings.length) {
    $("rules").innerHTML = warnings.map((w) =>
      `<li class="error"><div class="error-head">rule <code>${esc(w.rule)}</code> was left out${w.at ? ` (at <code>${esc(w.at)}</code>)` : ""}</div><div class="error-msg small">${esc(w.message)}</div></li>`,
    ).join("") + $("rules").innerHTML;
  }
  const s = answer.stats || {};
  $("egraph").innerHTML = [
    ["e-nodes", full(s.egraph_nodes)], ["e-classes", full(s.egraph_classes)], ["iterations", full(s.iterations)],
    ["stop reason", esc(s.stop_reason || "–")], ["time", ms(s.optimize_ms)],
  ].map(([k, v]) => `<div class="stat"><div class="stat-v">${v}</div><div class="stat-k">${k}</div></div>`).join("");
}

/* ---------------- the sites sweep ---------------- */

async function startSweep(body) {
  const pk = programKey(body);
  const sites = body.cluster.sites;
  const hi = Math.max(16, sites);
  const ns = Array.from({length: hi}, (_, i) => i + 1);
  if (state.sweep && state.sweep.key === pk && state.sweep.ns.length === ns.length) {
    drawSweep();
    return;
  }
  const gen = ++state.sweepGen;
  state.sweep = {key: pk, ns, byN: new Map(), done: 0};
  drawSweep();
  const jobs = ns.map((n) => async () => {
    if (gen !== state.sweepGen) return;
    const b = JSON.parse(JSON.stringify(body));
    b.cluster.sites = n;
    const r = await optimizeCached(b);
    if (gen !== state.sweepGen) return;
    if (r.ok) {
      noteSeries(r.data.alternatives || []);
      const costs = new Map();
      for (const a of r.data.alternatives || []) {
        const k = seriesKey(a);
        costs.set(k, Math.min(costs.get(k) ?? Infinity, a.cost.total));
      }
      const {alts, chosen} = sortedAlternatives(r.data);
      state.sweep.byN.set(n, {costs, chosen: alts[chosen] ? seriesKey(alts[chosen]) : null});
    } else {
      state.sweep.byN.set(n, {error: r.data.error?.message || "failed"});
    }
    state.sweep.done++;
    drawSweep();
  });
  await pool(jobs, 4);
}

function drawSweep() {
  const sw = state.sweep;
  if (!sw) return;
  const series = [...state.colors.keys()]
    .filter((k) => sw.ns.some((n) => sw.byN.get(n)?.costs?.has(k)))
    .map((k) => ({key: k, label: state.labels.get(k) || k, color: state.colors.get(k)}));
  const current = Number($("sites").value);
  renderSweep($("sweepChart"), sw, series, current, (n) => {
    $("sites").value = String(n);
    $("sitesOut").textContent = String(n);
    scheduleOptimize(0);
  });
  $("sweepStatus").textContent = sw.done < sw.ns.length ? `optimizing ${sw.done}/${sw.ns.length}…` : `${sw.ns.length} site counts`;
  document.body.dataset.sweep = sw.done < sw.ns.length ? "busy" : "done";
}

/* ---------------- run ---------------- */

const SMALL_BLOCK = 8;
const RUN_LIMIT = 1_000_000; // floats of one relation above which Run uses a scaled-down copy

function relationFloats(program, report) {
  let max = 0, where = "";
  for (const [n, inp] of Object.entries(program.inputs || {})) {
    const f = (inp.key_bounds || []).reduce((a, b) => a * b, 1) * (inp.array_bounds || []).reduce((a, b) => a * b, 1);
    if (f > max) { max = f; where = n; }
  }
  for (const [n, r] of Object.entries(report || {})) {
    const f = (Number(r.tuples) || 0) * (r.array_bounds || []).reduce((a, b) => a * b, 1);
    if (f > max) { max = f; where = n; }
  }
  return {max, where};
}

function scaledDown(program) {
  const p = JSON.parse(JSON.stringify(program));
  for (const inp of Object.values(p.inputs || {})) {
    inp.array_bounds = (inp.array_bounds || []).map((d) => Math.min(d, SMALL_BLOCK));
  }
  return p;
}

function resetRun() {
  if (!state.answer) return;
  const {max, where} = relationFloats(state.body, state.answer.report);
  const big = max > RUN_LIMIT;
  state.runScaled = big;
  const blocks = Object.values(state.body.inputs || {}).map((i) => dims(i.array_bounds));
  $("runNote").innerHTML = big
    ? `The data is too large to run here (<span class="mono">${esc(where)}</span> holds ${si(max)} floats). <b>Run executes a scaled-down copy</b>: the same program, keys and sites, with blocks of at most ${SMALL_BLOCK}×${SMALL_BLOCK} instead of ${esc([...new Set(blocks)].join(", "))}, on random data.`
    : `Runs the chosen plan on random data through <span class="mono">POST /v1/execute</span>.`;
  $("run").textContent = big ? `Run scaled-down copy (blocks ≤ ${SMALL_BLOCK})` : "Run on random data";
  $("run").disabled = false;
  $("runResult").innerHTML = "";
  $("runResult").dataset.state = "";
}

async function run() {
  if (!state.body) return;
  const program = state.runScaled ? scaledDown(state.body) : JSON.parse(JSON.stringify(state.body));
  program.data = {};
  Object.keys(program.inputs || {}).forEach((n, i) => { program.data[n] = {random: {seed: 7 + i}}; });
  $("run").disabled = true;
  $("runResult").innerHTML = `<div class="muted">running…</div>`;
  $("runResult").dataset.state = "busy";
  const r = await postJson("/v1/execute", program);
  $("run").disabled = false;
  if (!r.ok) {
    const e = r.data.error || {};
    $("runResult").innerHTML = `<div class="error"><code>${esc(e.code)}</code>${e.at ? " at <span class='mono'>" + esc(e.at) + "</span>" : ""}: ${esc(e.message)}</div>`;
    $("runResult").dataset.state = "error";
    return;
  }
  renderRun(r.data, program);
}

function stripBounds(plan) {
  const p = JSON.parse(JSON.stringify(plan));
  for (const i of Object.values(p.inputs || {})) delete i.array_bounds;
  return JSON.stringify(p);
}

function renderRun(d, program) {
  const timings = d.timings_ms || {};
  const perOp = Object.keys(timings).filter((k) => k !== "total");
  const report = d.report || {};
  const moved = d.floats_moved || {};
  const nodes = Object.entries(d.plan?.nodes || {});
  const maxF = Math.max(1, ...nodes.map(([n]) => Math.max(Number(report[n]?.network_floats) || 0, Number(moved[n]) || 0)));
  const maxT = Math.max(1e-9, ...perOp.map((k) => Number(timings[k]) || 0));
  const same = state.answer && stripBounds(d.plan) === stripBounds(state.answer.plan);
  const ok = d.network_floats_measured === d.network_floats_predicted;
  let html = `<div class="run-head">
      <div class="stat"><div class="stat-v">${ms(timings.total)}</div><div class="stat-k">measured, total</div></div>
      <div class="stat"><div class="stat-v">${si(d.network_floats_measured)}</div><div class="stat-k">floats moved, measured</div></div>
      <div class="stat"><div class="stat-v">${si(d.network_floats_predicted)}</div><div class="stat-k">floats moved, predicted</div></div>
      <div class="stat ${ok ? "good" : "warn"}"><div class="stat-v">${ok ? "✓ equal" : "≠"}</div><div class="stat-k">measured vs predicted</div></div>
    </div>
    <div class="muted small">${state.runScaled ? "Scaled-down copy" : "Program"} on ${d.sites ?? program.cluster.sites} sites; ${same ? "the optimizer chose the same plan as above for it." : "<b>the optimizer chose a different plan for it</b> (its operators are listed below)."}
    ${perOp.length ? "" : " Per-operator timing is not available from this executor: only the total is measured."}</div>
    <table class="run-table"><thead><tr><th>operator</th><th>op</th><th class="num">predicted floats</th><th class="num">measured floats</th><th class="bars">floats moved: <i class="pair-key pred"></i> predicted <i class="pair-key meas"></i> measured</th>${perOp.length ? "<th class='num'>time</th><th class='bars'></th>" : ""}</tr></thead><tbody>`;
  for (const [n, node] of nodes) {
    const p = Number(report[n]?.network_floats) || 0;
    const m = Number(moved[n]) || 0;
    const t = timings[n];
    html += `<tr class="${p !== m ? "mismatch" : ""}"><td class="mono">${esc(n)}</td><td>${esc(node.op)} <span class="muted small">${esc(clip(paramText(node), 26))}</span></td>
      <td class="num">${full(p)}</td><td class="num">${full(m)}</td>
      <td class="bars"><div class="pair"><i class="pred" style="width:${(100 * p / maxF).toFixed(1)}%"></i><i class="meas" style="width:${(100 * m / maxF).toFixed(1)}%"></i></div></td>
      ${perOp.length ? `<td class="num">${t === undefined ? "–" : ms(Number(t))}</td><td class="bars"><div class="pair"><i class="time" style="width:${t === undefined ? 0 : (100 * t / maxT).toFixed(1)}%"></i></div></td>` : ""}</tr>`;
  }
  html += `</tbody></table>`;
  const outs = Object.entries(d.outputs || {});
  if (outs.length) {
    html += `<div class="muted small">outputs: ` + outs.map(([n, o]) => `<span class="mono">${esc(n)}</span> ${dims(o.key_bounds)} keys of ${dims(o.array_bounds)}, checksum ${full(o.checksum)}`).join("; ") + `</div>`;
  }
  $("runResult").innerHTML = html;
  $("runResult").dataset.state = "done";
}

/* ---------------- examples, wiring ---------------- */

function pick(name) {
  const ex = state.examples[name];
  if (!ex) return;
  $("example").value = name;
  $("description").textContent = ex.description || "";
  editor.value = JSON.stringify(ex.program, null, 2);
  setControls(ex.program.cluster);
  showError(null);
  optimize();
}

async function load() {
  fetch("/v1/rules").then((r) => r.json()).then((rules) => {
    for (const r of rules) state.rules.set(r.name, r);
    if (state.answer) render();
  }).catch(() => {});
  try {
    const res = await fetch("/v1/examples");
    state.examples = await res.json();
  } catch (e) {
    showError({code: "network", message: "could not load the examples: " + e.message, at: ""});
    return;
  }
  const sel = $("example");
  sel.innerHTML = "";
  for (const [name, ex] of Object.entries(state.examples)) {
    const o = document.createElement("option");
    o.value = name;
    o.textContent = name;
    o.title = ex.description || "";
    sel.appendChild(o);
  }
  const first = "matmul" in state.examples ? "matmul" : Object.keys(state.examples)[0];
  if (first) pick(first);
}

$("example").addEventListener("change", (e) => pick(e.target.value));
$("optimize").addEventListener("click", () => optimize());
$("editor").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); optimize(); }
});
$("sites").addEventListener("input", () => {
  $("sitesOut").textContent = $("sites").value;
  if (state.sweep) drawSweep();
  scheduleOptimize(150);
});
for (const id of ["alpha", "beta"]) $(id).addEventListener("change", () => scheduleOptimize(0));
$("run").addEventListener("click", run);
window.__tra = state; // for debugging from the console
load();
