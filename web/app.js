// tra plan explorer: why did one plan beat another?
// Talks to GET /v1/examples, GET /v1/rules, POST /v1/optimize, POST /v1/execute.
//
// The editor's JSON is the one state of the page: the sites slider and the
// α/β inputs show its `cluster` and rewrite it when moved, and Optimize sends
// exactly the text on screen.

import {esc, full, si, ms, dims, clip, pool, exact, kernelText, PALETTE, seriesTag} from "./util.js";
import {Editor, locate, offsetOf, setMember} from "./editor.js";
import {DagView, mostExpensive, paramText} from "./dag.js";
import {renderSweep} from "./chart.js";
import {acronym, closeCall, ratioText, sameTotal, tieBreak} from "./explain.js";

const $ = (id) => document.getElementById(id);
const editor = new Editor($("editor"));

const state = {
  examples: {},
  rules: new Map(),
  answer: null,        // the last successful optimize answer
  body: null,          // the program that produced it
  gen: 0,              // generation of the main optimize request
  sweepGen: 0,
  sweep: null,         // {key, ns, byN}
  colors: new Map(),   // series key (the join strategies) → colour
  tags: new Map(),     // series key → letter
  labels: new Map(),   // series key → label (at the current site count when known)
  colorKey: null,      // the program the colours belong to
  views: [],           // the DAG views of the cards
};

/** What the strategy acronyms at the head of a label mean. */
const ACRONYMS = {
  BMM: "Broadcast matrix multiply: one operand is copied to every site, the other stays partitioned.",
  CMM: "Cross-product matrix multiply: both operands are partitioned on the common dimension k; each site multiplies its blocks and the partial sums are added after an exchange.",
  RMM: "Replication-based (3D) matrix multiply: operands are replicated along the dimension they lack, so each site computes whole sums for its output blocks.",
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

/* ---------------- the editor is the state; the controls follow it ---------------- */

/** The defaults the API applies to a missing cluster field. */
const CLUSTER_DEFAULTS = {sites: 4, network_weight: 1, compute_weight: 0, cost_model: "network"};
const CONTROL_OF = {sites: "sites", network_weight: "alpha", compute_weight: "beta", cost_model: "costModel"};
/** The profile the API uses where a request gives none (docs/API.md). */
const PROFILE_DEFAULTS = {link_bytes_per_second: 1.25e9, site_flops_per_second: 1.0e11, memory_bytes_per_second: 1.0e10, latency_seconds: 1e-4, bytes_per_float: 4};
/** The server's own defaults, learnt from its answers to programs that name
 *  none (`tra serve --cost-model`, `--profile`): the model switch shows the
 *  model a program without `cost_model` gets. */
const SERVER = {cost_model: null};

/** Whether a profile is the API's defaults and nothing more. */
function isDefaultProfile(p) {
  const keys = Object.keys(p);
  return keys.length === Object.keys(PROFILE_DEFAULTS).length && keys.every((k) => p[k] === PROFILE_DEFAULTS[k]);
}

/** Predicted seconds, in the unit that reads best. */
function secs(s) {
  if (typeof s !== "number" || !Number.isFinite(s)) return "–";
  if (s >= 1) return s.toFixed(2) + " s";
  if (s >= 1e-3) return (s * 1e3).toFixed(2) + " ms";
  return (s * 1e6).toFixed(1) + " µs";
}

/** The editor's program, or a client-side error. */
function parseEditor() {
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
  return {program};
}

/** Whether a program's cluster is something the controls can show and edit. */
function clusterEditable(program) {
  const c = program.cluster;
  return c === undefined || c === null || (typeof c === "object" && !Array.isArray(c));
}

/** The controls show the editor's cluster (defaults where a field is absent). */
function controlsFromEditor() {
  const r = parseEditor();
  const ok = !r.error && clusterEditable(r.program);
  for (const id of Object.values(CONTROL_OF)) $(id).disabled = !ok;
  $("controlsNote").textContent = ok ? "" : r.error ? "Fix the JSON to use these controls." : "`cluster` must be an object to use these controls.";
  $("controlsNote").classList.toggle("hidden", ok);
  if (!ok) return;
  const c = r.program.cluster || {};
  const sites = c.sites ?? CLUSTER_DEFAULTS.sites;
  if (Number.isInteger(sites) && sites >= 1) {
    $("sites").max = String(Math.max(32, sites));
    $("sites").value = String(sites);
  }
  $("sitesOut").textContent = typeof sites === "number" ? String(sites) : JSON.stringify(sites);
  for (const f of ["network_weight", "compute_weight"]) {
    const input = $(CONTROL_OF[f]);
    const v = c[f] ?? CLUSTER_DEFAULTS[f];
    // leave a number being typed ("0.", "1e") alone while it means the same
    if (document.activeElement === input && input.value !== "" && Number(input.value) === v) continue;
    input.value = typeof v === "number" ? String(v) : "";
  }
  const model = c.cost_model ?? SERVER.cost_model ?? CLUSTER_DEFAULTS.cost_model;
  if (model === "network" || model === "time") $("costModel").value = model;
  document.body.dataset.editorSites = String(sites);
  markStale();
}

/** A control moved: write its value into the editor's `cluster`. False if the editor cannot take it. */
function controlToEditor(field, value) {
  const r = parseEditor();
  if (r.error || !clusterEditable(r.program)) {
    controlsFromEditor();
    return false;
  }
  const text = editor.value;
  const v = JSON.stringify(value);
  const next = r.program.cluster ? setMember(text, ["cluster"], field, v) : setMember(text, [], "cluster", `{${JSON.stringify(field)}: ${v}}`);
  if (next === null) return false;
  editor.replace(next);
  document.body.dataset.editorSites = String(field === "sites" ? value : (r.program.cluster?.sites ?? CLUSTER_DEFAULTS.sites));
  markStale();
  return true;
}

/** Say so when the editor holds a program that is not the one whose results are shown. */
function markStale() {
  const r = parseEditor();
  const stale = state.body && !r.error && JSON.stringify(r.program) !== JSON.stringify(state.body);
  $("editedNote").classList.toggle("hidden", !stale);
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
    const ctl = {"cluster.sites": "sites", "cluster.network_weight": "alpha", "cluster.compute_weight": "beta", "cluster.cost_model": "costModel"}[err.at];
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

/** The contraction order a label ends with ("order X·(Y·V)", "written order", "reordered by agg-eager"), or "". */
function orderOf(label) {
  const m = /; (order [^;]*|written order|reordered[^;]*)$/.exec(label || "");
  return m ? m[1] : "";
}

/**
 * An alternative's series: its join strategies and its contraction order
 * (the optimizer keeps one alternative per strategy list and order).
 */
function seriesKey(alt) {
  return JSON.stringify(alt.strategy || []) + (alt.strategy?.length ? "" : "|" + alt.label) + "|" + orderOf(alt.label);
}

function noteSeries(alts, {current = false} = {}) {
  for (const a of alts) {
    const k = seriesKey(a);
    if (!state.colors.has(k)) {
      state.tags.set(k, seriesTag(state.colors.size));
      state.colors.set(k, PALETTE[state.colors.size % PALETTE.length]);
    }
    if (current || !state.labels.has(k)) state.labels.set(k, a.label);
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
  clearTimeout(debounce);
  const req = parseEditor();
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
    state.tags = new Map();
    state.labels = new Map();
  }
  state.answer = r.data;
  state.body = body;
  // A program naming no cost model got the server's: the switch shows it.
  const chose = r.data.stats && r.data.stats.cost_model;
  if (body.cluster?.cost_model === undefined && (chose === "network" || chose === "time")) {
    SERVER.cost_model = chose;
    $("costModel").value = chose;
  }
  noteSeries(r.data.alternatives || [], {current: true});
  render();
  markStale();
  const sites = body.cluster?.sites ?? CLUSTER_DEFAULTS.sites;
  document.body.dataset.sites = String(sites);
  document.body.dataset.optimized = String(gen);
  startSweep(body);
  resetRun();
}

/* ---------------- rendering the answer ---------------- */

/** The total a plan's operator shares are taken of: the report's per-operator totals are the
 * network model's `α·floats + β·flops` under either model, so under `time` (whose plan total is
 * seconds) the shares are of their sum. */
function planTotalOf(a) {
  if ((state.answer?.stats || {}).cost_model !== "time") return a.cost.total;
  return Object.values(a.report || {}).reduce((s, r) => s + (Number(r.total) || 0), 0);
}

function alternativesOf(answer) {
  // the server sends the chosen plan first, then the others cheapest first (ties in its own order)
  return (answer.alternatives || []).map((a, i) => ({...a, index: i}));
}

/** The number of copies a key expression makes ("[0..4, k0, k1]" → 4). */
function fanout(key) {
  let f = 1;
  for (const m of String(key || "").matchAll(/(\d+)\s*\.\.\s*(\d+)/g)) f *= Math.max(1, Number(m[2]) - Number(m[1]));
  return f;
}

/** What an exchanged relation is, for people: "X", "filtered X", "4 copies of Y", "the matMul join's output". */
function relationText(plan, name) {
  let cur = name;
  const words = [];
  let copies = 1;
  for (let i = 0; i < 1000 && cur; i++) {
    if (plan.inputs && cur in plan.inputs) {
      return (copies > 1 ? `${copies} copies of ` : "") + (words.length ? words.join(" ") + " " : "") + cur;
    }
    const node = plan.nodes?.[cur];
    if (!node) return cur;
    if (node.op === "local_filter") { words.unshift("filtered"); cur = node.input; continue; }
    if (node.op === "shuffle") { cur = node.input; continue; }
    if (node.op === "local_map" && !node.kernel) { copies *= fanout(node.key); cur = node.input; continue; }
    const what = {local_join: "join", local_aggregate: "aggregation", local_map: "map", broadcast: "broadcast"}[node.op] || node.op;
    const k = kernelText(node.kernel);
    return `the ${k ? k + " " : ""}${what}'s output`;
  }
  return name;
}

function describeMoves(plan, report) {
  const ex = Object.entries(plan.nodes || {})
    .filter(([n]) => (Number(report?.[n]?.network_floats) || 0) > 0)
    .map(([n, node]) => ({op: node.op, of: relationText(plan, node.input ?? ""), floats: Number(report[n].network_floats)}));
  if (!ex.length) return "moves nothing";
  const parts = ex.map((e) => `${esc(e.op)} of <span class="rel">${esc(e.of)}</span> ${si(e.floats)}`);
  return "moves " + (parts.length > 4 ? parts.slice(0, 4).join(" + ") + ` + ${parts.length - 4} more` : parts.join(" + "));
}

function acronymTitle(label) {
  const a = acronym(label);
  return a && ACRONYMS[a] ? `${label}\n\n${a}: ${ACRONYMS[a]}` : label;
}

function tagHtml(key) {
  return `<b class="tag" style="background:${state.colors.get(key) || "#999"}">${esc(state.tags.get(key) || "?")}</b>`;
}

/** The tie note of the summary: which alternatives cost the same as the chosen one and what broke the tie. */
function tieNote(alts) {
  const best = alts[0];
  const tied = alts.slice(1).filter((a) => sameTotal(a.cost, best.cost));
  if (!tied.length) return "";
  const items = tied.map((a) => {
    const tb = tieBreak(best.cost, a.cost);
    return `<div><b>Tie</b> with ${tagHtml(seriesKey(a))} <b>${esc(a.label)}</b>, also ${si(a.cost.total)}: the chosen plan has ${esc(tb.short)}.</div>`;
  }).join("");
  return `<div class="tie-note" id="tieNote" data-by="${tieBreak(best.cost, tied[0].cost).by}">${items}
    <div class="small">Equal costs are broken by fewer flops, then fewer floats moved, then a fixed order (the plan of the
    optimizer's unrestricted search before the plans restricted to one join strategy), so the same program always gets the same plan.</div></div>`;
}

function render() {
  const answer = state.answer;
  const body = state.body;
  const alts = alternativesOf(answer);
  const cl = {...CLUSTER_DEFAULTS, ...(body.cluster || {})};
  const best = alts[0] || {cost: answer.cost, label: "chosen plan", plan: answer.plan, report: answer.report, strategy: []};
  const runner = alts[1];

  // summary: why the chosen plan won
  const timeModel = (answer.stats || {}).cost_model === "time";
  const costWords = timeModel ? `cost = predicted seconds (time model)` : `cost = ${cl.network_weight}·floats + ${cl.compute_weight}·flops`;
  let why = `<div class="summary-main"><span class="badge chosen">✓ chosen</span> ${tagHtml(seriesKey(best))} <b title="${esc(acronymTitle(best.label))}">${esc(best.label)}</b>
    — cost <b>${timeModel ? secs(answer.cost.total) : si(answer.cost.total)}</b> on ${cl.sites} site${cl.sites === 1 ? "" : "s"}
    <span class="muted">(${si(answer.cost.network_floats)} floats moved, ${si(answer.cost.flops)} flops, predicted <b id="chosenSeconds">${secs(answer.cost.seconds)}</b>; ${costWords})</span></div>`;
  if (runner) {
    const same = sameTotal(runner.cost, best.cost);
    why += `<div class="summary-why">It ${describeMoves(best.plan, best.report)}; the runner-up, ${tagHtml(seriesKey(runner))} <b>${esc(runner.label)}</b>, ${describeMoves(runner.plan, runner.report)}
      — ${same ? "<b>the same cost</b>" : `<b>${esc(ratioText(runner.cost, best.cost))}</b> the cost`}.</div>`;
    const close = alts.slice(1).map((a) => [a, closeCall(a.cost, best.cost, timeModel)]).filter(([, c]) => c);
    if (close.length) {
      why += `<div class="summary-why close-call" id="closeCall">${close.map(([a, c]) => `${tagHtml(seriesKey(a))} <b>${esc(a.label)}</b>: ${esc(c.text)}`).join("<br>")}</div>`;
    }
    why += tieNote(alts);
  } else {
    why += `<div class="summary-why">The e-graph holds only one strategy for this program. It ${describeMoves(best.plan, best.report)}.</div>`;
  }
  $("summary").innerHTML = why;

  // alternatives side by side
  const wrap = $("alts");
  for (const v of state.views) v.resize?.disconnect();
  state.views = [];
  wrap.innerHTML = "";
  const maxTotal = Math.max(...alts.map((a) => a.cost.total), 0);
  alts.forEach((a, i) => {
    const key = seriesKey(a);
    const card = document.createElement("article");
    const chosen = i === 0;
    const tb = chosen ? null : tieBreak(best.cost, a.cost);
    const close = chosen ? null : closeCall(a.cost, best.cost, timeModel);
    card.className = "alt-card" + (chosen ? " chosen" : "") + (tb ? " tied" : "");
    card.dataset.rank = String(i + 1);
    card.dataset.label = a.label;
    card.dataset.tag = state.tags.get(key) || "";
    const rel = chosen ? `<span class="badge chosen">✓ chosen</span>`
      : close ? `<span class="badge tie close-call" title="${esc(close.text)}">${esc(ratioText(a.cost, best.cost))} the chosen, ${esc(close.short)}</span>`
      : tb ? `<span class="badge tie" title="${esc(tb.text)}">tie — chosen has ${esc(tb.by === "order" ? "the first place in the fixed order" : tb.by === "flops" ? "fewer flops" : "fewer floats moved")}</span>`
        : `<span class="ratio">${esc(ratioText(a.cost, best.cost))} the chosen</span>`;
    const hot = [...mostExpensive(a.plan, a.report)];
    const strat = (a.strategy && a.strategy.length) ? [...new Set(a.strategy)].join(", ").replaceAll("_", " ") : "";
    card.innerHTML = `
      <header class="alt-head">
        <span class="rank">#${i + 1}</span>${tagHtml(key)}
        <span class="alt-label" title="${esc(acronymTitle(a.label))}">${esc(a.label)}</span>
      </header>
      <div class="alt-cost" data-total="${a.cost.total}">
        <span class="cost-total" title="cost ${full(a.cost.total)}">${timeModel ? secs(a.cost.total) : si(a.cost.total)}</span>
        <span class="muted small">cost</span>
        ${rel}
      </div>
      <div class="costbar" title="cost relative to the most expensive alternative"><i style="width:${maxTotal > 0 ? (100 * a.cost.total / maxTotal).toFixed(1) : 0}%"></i></div>
      <div class="alt-meta muted small"><b>${si(a.cost.network_floats)}</b> floats moved · <b class="alt-seconds" data-seconds="${a.cost.seconds}" title="${esc(bottleneckText(a.cost.bottleneck))}">${secs(a.cost.seconds)}</b> predicted · ${si(a.cost.flops)} flops · ${Object.keys(a.plan.nodes || {}).length} operators${hot.length ? " · hottest <b class='mono'>" + esc(hot.join(", ")) + "</b>" : ""}${strat ? "<br>joins: " + esc(strat) : ""}
        <br><button class="tool show-loads" data-rank="${i + 1}" title="Show where this plan's work lands, site by site, in the per-site load panel">per-site load</button></div>
      <div class="dag-wrap"></div>`;
    card.querySelector(".show-loads").addEventListener("click", () => renderSiteLoads(answer, cl, alts, i));
    wrap.appendChild(card);
  });
  // the plans are drawn once every card is in place, at their final widths
  alts.forEach((a, i) => {
    state.views.push(new DagView(wrap.children[i].querySelector(".dag-wrap"), a.plan, a.report, {
      planTotal: planTotalOf(a), builtBy: a.built_by || {}, rules: state.rules,
      onEnlarge: () => openDag(a, i),
    }));
  });
  $("altCount").textContent = `${alts.length} alternative${alts.length === 1 ? "" : "s"}, ${alts.some((a, i) => i > 0 && closeCall(a.cost, best.cost, timeModel)) ? "the chosen first, then cheapest first" : "cheapest first"}`;
  renderSiteLoads(answer, cl, alts, 0);

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
    ["stop reason", esc((s.stop_reason || "–").replaceAll("_", " ") + (s.stop_phase ? ` (${s.stop_phase.replaceAll("_", " ")})` : "")), "text"], ["time", ms(s.optimize_ms)],
  ].map(([k, v, cls]) => `<div class="stat"><div class="stat-v ${cls || ""}">${v}</div><div class="stat-k">${k}</div></div>`).join("");
}

/** What bounds a plan's predicted time, in words. */
function bottleneckText(b) {
  if (!b) return "no operator: no time";
  const what = {compute: "computing", link_in: "receiving", link_out: "sending", memory: "reading and writing memory", write: "writing the output's file"}[b.resource] || b.resource;
  return `bound by ${b.node}: site ${b.site} ${what} (${secs(b.seconds)})`;
}

/** One bar per site and resource for one plan (alternative `shown`, the
 *  chosen plan first): idle and overloaded sites stand out. */
function renderSiteLoads(answer, cl, alts, shown) {
  const alt = alts[shown];
  const loads = (alt && alt.site_loads) || (shown === 0 ? answer.site_loads : null) || [];
  const cost = alt ? alt.cost : answer.cost;
  $("loadsOf").textContent = shown === 0 ? "the chosen plan" : `#${shown + 1} ${alt.label}`;
  document.querySelectorAll("#alts .alt-card").forEach((c, j) => {
    c.classList.toggle("loads-shown", j === shown);
    const b = c.querySelector(".show-loads");
    if (b) b.textContent = j === shown ? "per-site load shown above" : "per-site load";
  });
  const max = (f) => Math.max(...loads.map((l) => Number(l[f]) || 0), 0);
  const m = {bytes_out: max("bytes_out"), bytes_in: max("bytes_in"), flops: max("flops"), output_bytes: max("output_bytes")};
  const bar = (l, f, cls) => {
    const v = Number(l[f]) || 0;
    const w = m[f] > 0 ? (100 * v / m[f]).toFixed(1) : 0;
    return `<div class="load-bar ${cls}" title="${f.replace("_", " ")} ${full(v)}"><i style="width:${w}%"></i></div>`;
  };
  const idle = loads.filter((l) => !(Number(l.flops) > 0)).length;
  $("loadsNote").textContent = loads.length ? `${loads.length - idle} of ${loads.length} sites compute; ${bottleneckText(cost.bottleneck)}` : "";
  // Bytes written into the outputs' files (by `tra run` on the cluster
  // runtime): a site that writes alone stands out as a busy link would.
  $("siteLoads").innerHTML = loads.length ? `<div class="load-legend small muted"><span class="key out">sent</span> <span class="key in">received</span> <span class="key flops">flops</span> <span class="key write">written to output files</span></div>` +
    loads.map((l, s) => `<div class="load-row" data-site="${s}" data-flops="${l.flops}" data-bytes-in="${l.bytes_in}" data-bytes-out="${l.bytes_out}" data-output-bytes="${l.output_bytes}">
      <span class="load-site mono">site ${s}</span>
      <div class="load-bars">${bar(l, "bytes_out", "out")}${bar(l, "bytes_in", "in")}${bar(l, "flops", "flops")}${bar(l, "output_bytes", "write")}</div>
      <span class="load-figs muted small">${si(l.bytes_out)}B ↑ · ${si(l.bytes_in)}B ↓ · ${si(l.flops)} flops · ${si(l.memory_bytes)}B memory · ${si(l.output_bytes)}B written</span></div>`).join("") : "";
  // The profile the answer says it used (older servers: the request's or the defaults).
  const p = (answer.stats && answer.stats.profile) || {...PROFILE_DEFAULTS, ...(cl.profile || {})};
  const from = cl.profile ? "" : isDefaultProfile(p) ? " (defaults)" : " (the server's, tra serve --profile)";
  $("profileInUse").textContent = `profile${from}: link ${si(p.link_bytes_per_second)}B/s per site and direction · ${si(p.site_flops_per_second)} flop/s per site · memory ${si(p.memory_bytes_per_second)}B/s per site · latency ${secs(p.latency_seconds)} per exchange · ${p.bytes_per_float} bytes per float` +
    (p.exchange_cpu_bytes_per_second ? ` · a site's processors exchange ${si(p.exchange_cpu_bytes_per_second)}B/s` : "") +
    (p.output_bytes_per_second ? ` · a site writes outputs at ${si(p.output_bytes_per_second)}B/s` : "") +
    (p.machine_processors && p.site_threads && p.machine_sites ? ` · measured as ${p.machine_sites} sites of ${p.site_threads} kernel thread${p.site_threads === 1 ? "" : "s"} sharing ${p.machine_processors} processors` : "") +
    (p.job_overhead_seconds ? ` · ${secs(p.job_overhead_seconds)} per job` : "");
}

/** The large view of one alternative's DAG. */
function openDag(a, i) {
  const dlg = $("dagDialog");
  $("dagDialogTitle").innerHTML = `#${i + 1} ${tagHtml(seriesKey(a))} ${esc(a.label)} <span class="muted small">— cost ${si(a.cost.total)}</span>`;
  const body = $("dagDialogBody");
  body.innerHTML = "";
  dlg.showModal();
  state.dialogView?.resize?.disconnect();
  state.dialogView = new DagView(body, a.plan, a.report, {
    planTotal: planTotalOf(a), builtBy: a.built_by || {}, rules: state.rules,
    maxHeight: Math.max(300, window.innerHeight - 190), wheelZooms: true,
  });
}

/* ---------------- the sites sweep ---------------- */

async function startSweep(body) {
  const pk = programKey(body);
  const sites = body.cluster?.sites ?? CLUSTER_DEFAULTS.sites;
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
    b.cluster = {...(b.cluster || {}), sites: n};
    const r = await optimizeCached(b);
    if (gen !== state.sweepGen) return;
    if (r.ok) {
      const alts = r.data.alternatives || [];
      noteSeries(alts);
      const costs = new Map(), labels = new Map(), order = [];
      for (const a of alts) {
        const k = seriesKey(a);
        if (costs.has(k)) continue;
        costs.set(k, a.cost);
        labels.set(k, a.label);
        order.push(k);
      }
      state.sweep.byN.set(n, {costs, labels, order, chosen: order[0] ?? null});
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
    .map((k) => ({key: k, label: state.labels.get(k) || k, color: state.colors.get(k), tag: state.tags.get(k)}));
  const current = Number($("sites").value);
  renderSweep($("sweepChart"), sw, series, current, (n) => {
    if (controlToEditor("sites", n)) {
      controlsFromEditor();
      scheduleOptimize(0);
    }
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
  const whereText = state.body.inputs && where in state.body.inputs ? `input <span class="mono">${esc(where)}</span>` : `an intermediate result (${esc(relationText(state.answer.plan, where))})`;
  $("runNote").innerHTML = big
    ? `The data is too large to run here (${whereText} holds ${si(max)} floats). <b>Run executes a scaled-down copy</b>: the same program, keys and sites, with blocks of at most ${SMALL_BLOCK}×${SMALL_BLOCK} instead of ${esc([...new Set(blocks)].join(", "))}, on random data.`
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
  const fusedInto = new Map((Array.isArray(d.operators) ? d.operators : []).filter((o) => o.fused_into).map((o) => [o.name, o.fused_into]));
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
    <div class="muted small">${state.runScaled ? "Scaled-down copy" : "Program"} on ${d.sites ?? program.cluster?.sites ?? CLUSTER_DEFAULTS.sites} sites; ${same ? "the optimizer chose the same plan as above for it." : "<b>the optimizer chose a different plan for it</b> (its operators are listed below)."}
    ${perOp.length ? "" : " Per-operator timing is not available from this executor: only the total is measured."}</div>
    <table class="run-table"><thead><tr><th>operator</th><th>op</th><th class="num">predicted floats</th><th class="num">measured floats</th><th class="bars">floats moved: <i class="pair-key pred"></i> predicted <i class="pair-key meas"></i> measured</th>${perOp.length ? "<th class='num'>time</th><th class='bars'></th>" : ""}</tr></thead><tbody>`;
  for (const [n, node] of nodes) {
    const p = Number(report[n]?.network_floats) || 0;
    const m = Number(moved[n]) || 0;
    const t = timings[n];
    const fused = fusedInto.get(n);
    const time = t !== undefined ? ms(Number(t))
      : fused ? `<span class="fused" title="the executor computes this ${esc(node.op)} inside ${esc(fused)} (a fused matmul and sum); its time is counted there">fused into <span class="mono">${esc(fused)}</span></span>`
        : `<span class="muted" title="not timed on its own by this executor">not timed</span>`;
    html += `<tr class="${p !== m ? "mismatch" : ""}${fused ? " fused-row" : ""}"><td class="mono">${esc(n)}</td><td>${esc(node.op)} <span class="muted small">${esc(clip(paramText(node), 26))}</span></td>
      <td class="num">${full(p)}</td><td class="num">${full(m)}</td>
      <td class="bars"><div class="pair"><i class="pred" style="width:${(100 * p / maxF).toFixed(1)}%"></i><i class="meas" style="width:${(100 * m / maxF).toFixed(1)}%"></i></div></td>
      ${perOp.length ? `<td class="num">${time}</td><td class="bars"><div class="pair"><i class="time" style="width:${t === undefined ? 0 : (100 * t / maxT).toFixed(1)}%"></i></div></td>` : ""}</tr>`;
  }
  html += `</tbody></table>`;
  const outs = Object.entries(d.outputs || {});
  if (outs.length) {
    html += `<div class="muted small run-outputs">outputs: ` + outs.map(([n, o]) => `<span class="mono">${esc(n)}</span> ${dims(o.key_bounds)} keys of ${dims(o.array_bounds)}, sum of all elements <span class="mono checksum">${exact(o.checksum)}</span>`).join("; ") + `</div>`;
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
  controlsFromEditor();
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
$("program").addEventListener("input", () => controlsFromEditor());
$("sites").addEventListener("input", () => {
  $("sitesOut").textContent = $("sites").value;
  if (!controlToEditor("sites", Number($("sites").value))) return;
  if (state.sweep) drawSweep();
  scheduleOptimize(150);
});
for (const [field, id] of [["network_weight", "alpha"], ["compute_weight", "beta"]]) {
  $(id).addEventListener("input", () => {
    const v = $(id).value.trim();
    if (v !== "" && Number.isFinite(Number(v))) controlToEditor(field, Number(v));
  });
  $(id).addEventListener("change", () => {
    const v = $(id).value.trim();
    if (v === "" || !Number.isFinite(Number(v))) { controlsFromEditor(); return; }
    controlToEditor(field, Number(v));
    scheduleOptimize(0);
  });
}
$("costModel").addEventListener("change", () => {
  if (controlToEditor("cost_model", $("costModel").value)) scheduleOptimize(0);
});
$("dagDialogClose").addEventListener("click", () => $("dagDialog").close());
$("dagDialog").addEventListener("close", () => { state.dialogView?.resize?.disconnect(); state.dialogView = null; });
$("run").addEventListener("click", run);
window.__tra = state; // for debugging from the console
load();
