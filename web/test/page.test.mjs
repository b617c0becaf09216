// Browser test of the page served by `tra serve`: Debian's chromium driven by
// playwright-core (no browser download). Run with `node --test web/test/`
// (scripts/web-test.sh installs what it needs). TRA_BIN names the binary
// (default target/debug/tra, relative to the repository root); TRA_URL tests
// a server already running there instead. Screenshots of the page at 1024 and
// 1920 px go to web/test/artifacts/ (git-ignored).

import {test, before, after} from "node:test";
import assert from "node:assert/strict";
import {spawn} from "node:child_process";
import {createServer} from "node:net";
import {existsSync, mkdirSync} from "node:fs";
import {dirname, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {chromium} from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..");
const bin = resolve(root, process.env.TRA_BIN || "target/debug/tra");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
const artifacts = resolve(here, "artifacts");
const screenshot = resolve(artifacts, "error-1920.png");

let server;
let serverLog = "";
let browser;
let page;
let base;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.unref();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const {port} = s.address();
      s.close(() => ok(port));
    });
  });
}

async function waitHealthy(url, ms) {
  const until = Date.now() + ms;
  let last;
  while (Date.now() < until) {
    if (server && server.exitCode !== null) throw new Error(`tra serve exited with ${server.exitCode}:\n${serverLog}`);
    try {
      const r = await fetch(url + "/healthz");
      if (r.ok) return;
      last = new Error("status " + r.status);
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`tra serve did not become healthy at ${url}: ${last}\n${serverLog}`);
}

/** The alternatives shown: [{rank, label, total, chosen}]. */
async function alternatives() {
  return page.$$eval(".alt-card", (cards) => cards.map((c) => ({
    rank: Number(c.dataset.rank),
    label: c.dataset.label,
    total: Number(c.querySelector(".alt-cost").dataset.total),
    costText: c.querySelector(".cost-total").textContent.trim(),
    chosen: c.classList.contains("chosen"),
    operators: c.querySelectorAll("g.dnode.op").length,
    hot: c.querySelectorAll("g.dnode.hot").length,
  })));
}

/** Pick an example and wait until the page shows the optimized answer for the editor's program. */
async function pick(name) {
  await page.selectOption("#example", name);
  await settled();
}

/** Wait until the shown answer is the one for the program in the editor. */
async function settled() {
  await page.waitForFunction(() => {
    if (document.body.dataset.busy !== "0" || !window.__tra.body) return false;
    try {
      return JSON.stringify(window.__tra.body) === JSON.stringify(JSON.parse(document.querySelector("#program").value));
    } catch (_) {
      return false;
    }
  });
}

/** A figure as the page writes it ("50 M") as a number. */
function parseSi(s) {
  const m = String(s).trim().match(/^(-?[\d.]+)\s*([kMGTP]?)$/);
  assert.ok(m, `a number with an SI unit: ${s}`);
  return Number(m[1]) * {"": 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15}[m[2]];
}

/** Operator boxes of a card that are not wholly inside its DAG view. */
async function outsideView(card) {
  return card.evaluate((c) => {
    const v = c.querySelector(".dag-view").getBoundingClientRect();
    const out = [];
    for (const g of c.querySelectorAll("g.dnode")) {
      const r = g.getBoundingClientRect();
      if (r.left < v.left - 0.5 || r.right > v.right + 0.5 || r.top < v.top - 0.5 || r.bottom > v.bottom + 0.5) out.push(g.dataset.node);
    }
    return {outside: out, operators: c.querySelectorAll("g.dnode.op").length};
  });
}

before(async () => {
  assert.ok(existsSync(chromiumPath), `no chromium at ${chromiumPath}: apt-get install chromium`);
  mkdirSync(artifacts, {recursive: true});
  if (process.env.TRA_URL) {
    base = process.env.TRA_URL.replace(/\/$/, "");
  } else {
    assert.ok(existsSync(bin), `no tra binary at ${bin}: build it (cargo build -p tra-api) or set TRA_BIN`);
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    server = spawn(bin, ["serve", "--addr", `127.0.0.1:${port}`], {stdio: ["ignore", "pipe", "pipe"], env: {...process.env, RUST_LOG: "warn"}});
    server.stdout.on("data", (d) => { serverLog += d; });
    server.stderr.on("data", (d) => { serverLog += d; });
    await waitHealthy(base, 30_000);
  }
  browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  page = await browser.newPage({viewport: {width: 1920, height: 1080}});
  page.setDefaultTimeout(20_000);
});

after(async () => {
  if (browser) await browser.close().catch(() => {});
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => { server.once("exit", r); setTimeout(r, 3000); });
  }
});

test("the page's files are built into tra serve", async () => {
  const index = await fetch(base + "/");
  assert.equal(index.status, 200);
  const html = await index.text();
  for (const src of html.matchAll(/(?:src|href)="(\/web\/[^"]+)"/g)) {
    const r = await fetch(base + src[1]);
    assert.equal(r.status, 200, `${src[1]} is served`);
  }
  const dagre = await fetch(base + "/web/vendor/dagre.min.js");
  assert.equal(dagre.status, 200);
  assert.match(dagre.headers.get("content-type"), /javascript/);
  assert.match(await dagre.text(), /dagre/);
  const missing = await fetch(base + "/web/no-such-file.js");
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, "not_found");
});

test("the page of tra serve", async (t) => {
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  // the broken program's 422 is expected; any other failed request or console error is not
  page.on("console", (m) => { if (m.type() === "error" && !/status of 422/.test(m.text())) pageErrors.push(m.text()); });
  page.on("response", (r) => { if (r.status() >= 400 && r.status() !== 422) pageErrors.push(`${r.status()} ${r.url()}`); });

  await t.test("loads with the matmul example optimized: three or more alternatives with costs, the cheapest marked", async () => {
    await page.goto(base + "/");
    await page.waitForFunction(() => document.querySelectorAll(".alt-card").length >= 3);
    assert.equal(await page.$eval("#example", (s) => s.value), "matmul");
    const options = await page.$$eval("#example option", (os) => os.map((o) => o.value));
    const examples = await (await fetch(base + "/v1/examples")).json();
    assert.deepEqual(options, Object.keys(examples), "the picker offers every example");
    const alts = await alternatives();
    assert.ok(alts.length >= 3, `three matmul alternatives, got ${alts.length}`);
    for (const a of alts) {
      assert.ok(Number.isFinite(a.total) && a.total > 0, `alternative ${a.label} has a cost: ${a.total}`);
      assert.match(a.costText, /\d/);
      assert.ok(a.operators >= 2, `alternative ${a.label} is drawn as a DAG (${a.operators} operators)`);
      assert.ok(a.hot >= 1, `alternative ${a.label} highlights its most expensive operator`);
    }
    const labels = alts.map((a) => a.label);
    for (const s of ["BMM", "CMM", "RMM"]) {
      assert.ok(labels.some((l) => new RegExp(`^${s}\\b[^—]* — `).test(l)), `a ${s} strategy, named strategy first, among ${labels.join(" | ")}`);
    }
    assert.ok(labels.includes("CMM — shuffle X by k, Y by k; partial sums exchanged"), labels.join(" | "));
    const chosen = alts.filter((a) => a.chosen);
    assert.equal(chosen.length, 1, "exactly one alternative is marked chosen");
    assert.equal(chosen[0].rank, 1, "the chosen one is first");
    assert.equal(chosen[0].total, Math.min(...alts.map((a) => a.total)), "the chosen one is the cheapest");
    for (let i = 1; i < alts.length; i++) assert.ok(alts[i - 1].total <= alts[i].total, "cheapest first");
    const rules = await page.$$eval("#rules .rule-name", (xs) => xs.map((x) => x.textContent));
    assert.ok(rules.length >= 1, "the rules that produced the plan are listed");
    const stats = await page.$eval("#egraph", (e) => e.textContent);
    for (const k of ["e-nodes", "e-classes", "iterations", "stop reason", "time"]) assert.ok(stats.includes(k), `e-graph figure ${k}`);
  });

  await t.test("the sites chart plots every alternative against the number of sites", async () => {
    await page.waitForFunction(() => document.body.dataset.sweep === "done", null, {timeout: 60_000});
    const series = await page.$$eval("#sweepChart path.series", (ps) => ps.length);
    assert.ok(series >= 3, `a line per alternative, got ${series}`);
    const strip = await page.$$eval("#sweepChart rect.strip", (rs) => rs.length);
    assert.ok(strip >= 16, `a chosen-strip cell per site count, got ${strip}`);
    const flips = await page.$$eval("#sweepChart line.flip-line", (ls) => ls.length);
    assert.ok(flips >= 1, "the choice flips somewhere between 1 and 16 sites for matmul");
  });

  await t.test("moving the sites slider re-optimizes and the costs change", async () => {
    const before = await alternatives();
    const sitesBefore = await page.$eval("body", (b) => b.dataset.sites);
    await page.locator("#sites").fill("2");
    await page.waitForFunction(() => document.body.dataset.sites === "2");
    await page.waitForFunction((prev) => {
      const now = [...document.querySelectorAll(".alt-card .alt-cost")].map((c) => c.dataset.total).join(",");
      return now !== prev;
    }, before.map((a) => String(a.total)).join(","));
    const after = await alternatives();
    assert.notEqual(sitesBefore, "2");
    assert.notDeepEqual(after.map((a) => a.total), before.map((a) => a.total), "costs changed with the number of sites");
    const chosen = after.filter((a) => a.chosen);
    assert.equal(chosen.length, 1);
    assert.equal(chosen[0].total, Math.min(...after.map((a) => a.total)));
    assert.equal(await page.$eval("#sweepChart .current-label", (e) => e.textContent), "N = 2");
    // back to the example's 10 sites for the rest
    await page.locator("#sites").fill("10");
    await page.waitForFunction(() => document.body.dataset.sites === "10");
  });

  await t.test("predicted seconds per alternative, per-site loads, the profile, and the cost-model switch", async () => {
    const seconds = await page.$$eval(".alt-card .alt-seconds", (xs) => xs.map((x) => Number(x.dataset.seconds)));
    assert.ok(seconds.length >= 3 && seconds.every((s) => Number.isFinite(s) && s > 0), `predicted seconds on every card: ${seconds}`);
    const texts = await page.$$eval(".alt-card .alt-seconds", (xs) => xs.map((x) => x.textContent));
    assert.ok(texts.every((t) => /\d.*(s|ms|µs)$/.test(t)), `seconds written with a unit: ${texts}`);
    const rows = await page.$$eval("#siteLoads .load-row", (rs) => rs.map((r) => ({flops: Number(r.dataset.flops), out: Number(r.dataset.bytesOut), written: Number(r.dataset.outputBytes)})));
    assert.equal(rows.length, 10, "one load row per site of the example's 10");
    assert.ok(rows.some((r) => r.flops > 0), "some site computes");
    // The output's blocks are written by the sites that hold them: together, the whole output once.
    const answer = await page.evaluate(() => window.__tra.answer);
    const z = answer.report[answer.plan.outputs[0]];
    const outputBytes = z.tuples * z.array_bounds.reduce((a, b) => a * b, 1) * 4;
    assert.equal(rows.reduce((a, r) => a + r.written, 0), outputBytes, `bytes written over the sites: ${rows.map((r) => r.written)}`);
    assert.match(await page.$eval("#siteLoads .load-row .load-figs", (e) => e.textContent), /B written$/);
    // Another alternative's loads, on demand: the panel follows the card's button, and back.
    const loadsShown = () => page.$$eval("#siteLoads .load-row", (rs) => rs.map((r) => [Number(r.dataset.flops), Number(r.dataset.bytesIn), Number(r.dataset.bytesOut), Number(r.dataset.outputBytes)]));
    const expected = (i) => answer.alternatives[i].site_loads.map((l) => [l.flops, l.bytes_in, l.bytes_out, l.output_bytes]);
    assert.deepEqual(await loadsShown(), expected(0), "the chosen plan's loads first");
    await page.click(".alt-card[data-rank='2'] .show-loads");
    assert.deepEqual(await loadsShown(), expected(1), "the second alternative's loads once asked");
    assert.ok((await page.$eval("#loadsOf", (e) => e.textContent)).startsWith("#2 "), "the panel names the plan it shows");
    assert.ok(await page.$eval(".alt-card[data-rank='2']", (e) => e.classList.contains("loads-shown")));
    assert.notDeepEqual(expected(1), expected(0), "the example's first two plans load the sites differently");
    await page.click(".alt-card[data-rank='1'] .show-loads");
    assert.deepEqual(await loadsShown(), expected(0));
    assert.equal(await page.$eval("#loadsOf", (e) => e.textContent), "the chosen plan");
    const profileText = await page.$eval("#profileInUse", (e) => e.textContent);
    assert.match(profileText, /profile \(defaults\): link 1\.25 GB\/s/);
    assert.match(profileText, /memory 10 GB\/s per site/);
    assert.doesNotMatch(profileText, /processors exchange/, "no exchange processor rate without one in the profile");
    assert.doesNotMatch(profileText, /sharing/, "no shared machine without one in the profile");
    assert.equal(await page.$eval("#costModel", (e) => e.value), "network");
    const before = await alternatives();
    await page.selectOption("#costModel", "time");
    await page.waitForFunction(() => /"cost_model": "time"/.test(document.querySelector("#program").value));
    await settled();
    assert.equal(await page.evaluate(() => window.__tra.answer.stats.cost_model), "time");
    const after = await alternatives();
    const secs = await page.$$eval(".alt-card .alt-seconds", (xs) => xs.map((x) => Number(x.dataset.seconds)));
    // The chosen plan first: within the time model's resolution (5%) of the
    // fastest (a close call goes to the plan moving fewer bytes through
    // memory); then the others, fastest first.
    assert.ok(secs[0] <= Math.min(...secs) * 1.05 * (1 + 1e-9), `the chosen plan is within 5% of the fastest: ${secs}`);
    for (let i = 2; i < secs.length; i++) assert.ok(secs[i - 1] <= secs[i], `the others ranked by predicted seconds under time: ${secs}`);
    assert.notDeepEqual(after.map((a) => a.total), before.map((a) => a.total), "the costs are now seconds");
    assert.match(await page.$eval("#summary", (e) => e.textContent), /time model/);
    // back to the network model, by editing the program: the switch follows
    await page.selectOption("#costModel", "network");
    await page.waitForFunction(() => /"cost_model": "network"/.test(document.querySelector("#program").value));
    await settled();
  });

  await t.test("Run executes a scaled-down copy and shows measured against predicted floats", async () => {
    const note = await page.$eval("#runNote", (e) => e.textContent);
    assert.match(note, /scaled-down copy/, "the page says the built-in matmul runs scaled down");
    await page.click("#run");
    await page.waitForFunction(() => ["done", "error"].includes(document.querySelector("#runResult").dataset.state), null, {timeout: 60_000});
    const state = await page.$eval("#runResult", (e) => e.dataset.state);
    assert.equal(state, "done", await page.$eval("#runResult", (e) => e.textContent));
    const text = await page.$eval("#runResult", (e) => e.textContent);
    assert.match(text, /measured vs predicted/);
    assert.match(text, /✓ equal/);
    const rows = await page.$$eval("#runResult tbody tr", (rs) => rs.map((r) => r.lastElementChild.previousElementSibling.textContent.trim()));
    assert.ok(rows.length >= 3, `a row per operator, got ${rows.length}`);
    for (const time of rows) assert.match(time, /^(\d[\d.]* ms|fused into \S+)$/, "every operator has its time or says where it was fused");
    assert.ok(rows.some((t) => t.startsWith("fused into")), `the matmul's join is fused into its sum and says so: ${rows}`);
    const checksum = await page.$eval("#runResult .checksum", (e) => e.textContent);
    assert.match(checksum, /^-?\d+(\.\d+)?(e[+-]\d+)?$/, `a checksum to read in full, without thousands separators: ${checksum}`);
  });


  await t.test("the editor and the controls are one state: edit either, the other follows", async () => {
    await pick("matmul");
    const text = await page.$eval("#program", (ta) => ta.value);
    assert.match(text, /"sites": 10/);
    // JSON → controls, before anything is optimized
    const edited = text.replace('"sites": 10', '"sites": 2, "network_weight": 3');
    await page.fill("#program", edited);
    assert.equal(await page.$eval("#sites", (e) => e.value), "2");
    assert.equal(await page.$eval("#sitesOut", (e) => e.textContent), "2");
    assert.equal(await page.$eval("#alpha", (e) => e.value), "3");
    assert.ok(await page.isVisible("#editedNote"), "the page says the program changed since it was optimized");
    await page.click("#optimize");
    await page.waitForFunction(() => document.body.dataset.sites === "2");
    await settled();
    let summary = await page.$eval("#summary", (e) => e.textContent);
    assert.match(summary, /on 2 sites/, "the program on screen is the one optimized");
    assert.match(summary, /cost = 3·floats/);
    assert.ok(!(await page.isVisible("#editedNote")));
    // controls → JSON
    await page.locator("#sites").fill("5");
    await page.waitForFunction(() => document.body.dataset.sites === "5");
    await settled();
    let program = JSON.parse(await page.$eval("#program", (ta) => ta.value));
    assert.equal(program.cluster.sites, 5, "the slider rewrote the JSON");
    assert.equal(program.cluster.network_weight, 3, "the rest of the cluster is kept");
    assert.equal(await page.$eval("#program", (ta) => ta.value), edited.replace('"sites": 2', '"sites": 5'), "only the number changed: the JSON keeps its layout");
    await page.fill("#beta", "0.001");
    await page.press("#beta", "Tab");
    await page.waitForFunction(() => JSON.parse(document.querySelector("#program").value).cluster.compute_weight === 0.001);
    await settled();
    summary = await page.$eval("#summary", (e) => e.textContent);
    assert.match(summary, /on 5 sites/);
    assert.match(summary, /0\.001·flops/);
    // no cluster: the controls show the API's defaults, and moving one adds it
    delete program.cluster;
    await page.fill("#program", JSON.stringify(program, null, 2));
    assert.equal(await page.$eval("#sites", (e) => e.value), "4");
    assert.equal(await page.$eval("#alpha", (e) => e.value), "1");
    assert.equal(await page.$eval("#beta", (e) => e.value), "0");
    await page.locator("#sites").fill("7");
    program = JSON.parse(await page.$eval("#program", (ta) => ta.value));
    assert.deepEqual(program.cluster, {sites: 7});
    await page.waitForFunction(() => document.body.dataset.sites === "7");
    await settled();
    // JSON that does not parse: the controls cannot follow it and say why
    await page.fill("#program", "{\n  \"inputs\": ");
    assert.equal(await page.$eval("#sites", (e) => e.disabled), true);
    assert.match(await page.$eval("#controlsNote", (e) => e.textContent), /Fix the JSON/);
  });

  await t.test("a tie says what broke it, and tied lines stay visible in the sites chart with the chosen one on top", async () => {
    await pick("matmul-common-large-dim");
    const note = await page.$eval("#tieNote", (e) => e.textContent.replace(/\s+/g, " "));
    assert.match(await page.$eval("#summary", (e) => e.textContent), /chosen.*CMM — /s);
    assert.match(note, /Tie with B RMM \(3D\) — .*, also 480 M/);
    // CMM and RMM move the same floats and do the same flops: the fixed order decides
    assert.match(note, /the chosen plan has the first place in the optimizer's fixed order \(same flops, same floats moved\)/);
    assert.match(note, /broken by fewer flops, then fewer floats moved, then a fixed order/);
    assert.equal(await page.$eval("#tieNote", (e) => e.dataset.by), "order");
    const badges = await page.$$eval(".alt-card .badge.tie", (bs) => bs.map((b) => b.textContent));
    assert.ok(badges.length >= 1, "the tied card says it is a tie");
    await page.waitForFunction(() => document.body.dataset.sweep === "done", null, {timeout: 60_000});
    const lines = await page.$$eval("#sweepChart path.series", (ps) => ps.map((p) => ({key: p.dataset.key, tied: p.classList.contains("tied"), d: p.getAttribute("d")})));
    const chosen = await page.evaluate(() => window.__tra.sweep.byN.get(10).chosen);
    const dashed = lines.filter((l) => l.tied && l.d);
    assert.ok(dashed.length >= 1, "the tied series is drawn dashed");
    const mine = lines.filter((l) => l.key === chosen && !l.tied && l.d);
    assert.equal(mine.length, 1, "the chosen series is drawn solid");
    assert.ok(dashed.every((l) => l.d !== mine[0].d), "a tied line is offset from the chosen one, not drawn over it");
    assert.equal(lines[lines.length - 1].key, chosen, "the chosen series is drawn last, on top");
    // hovering a site count says who wins there and why
    await page.hover('#sweepChart rect.hover-col[data-n="10"]');
    const tip = page.locator("#sweepChart .chart-tip");
    await tip.waitFor({state: "visible"});
    const tipText = await tip.textContent();
    assert.match(tipText, /10 sites/);
    assert.match(tipText, /wins: cost/);
    assert.match(tipText, /Tie at/);
  });

  await t.test("hovering where the choice flips explains it with both plans' costs", async () => {
    await pick("matmul");
    await page.waitForFunction(() => document.body.dataset.sweep === "done", null, {timeout: 60_000});
    const flip = await page.evaluate(() => {
      const sw = window.__tra.sweep;
      // a flip between two plans that both exist on both sides (at 1 site there is only the local plan)
      for (const n of sw.ns.slice(1)) {
        const a = sw.byN.get(n - 1), b = sw.byN.get(n);
        if (a.chosen !== b.chosen && a.costs.has(b.chosen) && b.costs.has(a.chosen)) return n;
      }
      return null;
    });
    assert.ok(flip, "the matmul's choice flips between 1 and 16 sites");
    await page.hover(`#sweepChart rect.hover-col[data-n="${flip}"]`);
    const tip = page.locator("#sweepChart .chart-tip");
    await tip.waitFor({state: "visible"});
    const text = await tip.textContent();
    assert.match(text, new RegExp(`Between ${flip - 1} and ${flip} sites the choice flips`));
    const costs = text.match(/costs [\d.]+ ?[kMGTP]? → [\d.]+ ?[kMGTP]?/g) || [];
    assert.ok(costs.length >= 1 && /→.*→/.test(text), `the costs of both plans on both sides of the flip: ${text}`);
  });

  await t.test("a 26-operator plan is fully visible after Fit; it pans, and a click shows an operator's details", async () => {
    await pick("ffnn-amazoncat");
    const card = page.locator(".alt-card.chosen");
    assert.equal(await card.locator(".dag-wrap").getAttribute("data-operators"), "26");
    for (let i = 0; i < 4; i++) await card.locator('button[data-act="in"]').click();
    assert.ok((await outsideView(card)).outside.length > 0, "zoomed in, some operators are out of view");
    await card.locator(".dag-fit").click();
    const fitted = await outsideView(card);
    assert.equal(fitted.operators, 26);
    assert.deepEqual(fitted.outside, [], "after Fit every operator is inside the view");
    const scale = Number(await card.locator(".dag-view").getAttribute("data-scale"));
    assert.ok(scale >= 0.15, `fitted at a scale where the boxes can still be told apart (${scale})`);
    const view = await card.locator(".dag-view").evaluate((e) => ({sh: e.scrollHeight, ch: e.clientHeight, sw: e.scrollWidth, cw: e.clientWidth}));
    assert.ok(view.sh <= view.ch + 1 && view.sw <= view.cw + 1, `no nested scroll area: ${JSON.stringify(view)}`);
    const overflowX = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflowX <= 0, `the page does not scroll sideways (${overflowX} px)`);
    // drag to pan
    const before = await card.locator("g.vp").getAttribute("transform");
    const box = await card.locator(".dag-view").boundingBox();
    await page.mouse.move(box.x + 12, box.y + 12);
    await page.mouse.down();
    await page.mouse.move(box.x + 90, box.y + 60, {steps: 6});
    await page.mouse.up();
    assert.notEqual(await card.locator("g.vp").getAttribute("transform"), before, "dragging pans the plan");
    await card.locator(".dag-fit").click();
    // click the most expensive operator: its details
    const hot = await card.locator("g.dnode.hot").first().getAttribute("data-node");
    await card.locator(`g.dnode[data-node="${hot}"]`).click();
    const details = card.locator(".dag-details");
    await details.waitFor({state: "visible"});
    assert.equal(await details.getAttribute("data-node"), hot);
    const text = (await details.textContent()).replace(/\s+/g, " ");
    for (const k of ["output frontier", "key bounds", "placement", "output size", "moves", "flops", "cost", "built by"]) {
      assert.ok(text.includes(k), `the details name ${k}: ${text}`);
    }
    assert.match(text, /floats = [\d.]+ [kMGT]?B over the network/, "bytes moved");
    const rule = await details.locator(".rule-ref").textContent();
    const rules = (await (await fetch(base + "/v1/rules")).json()).map((r) => r.name);
    assert.ok(rules.includes(rule), `the rule that built it (${rule}) is one of GET /v1/rules`);
    // collapse what only feeds an output, then expand it again
    const output = (await page.evaluate(() => window.__tra.answer.plan.outputs))[0];
    await card.locator(`g.dnode[data-node="${output}"]`).click();
    await details.locator(".collapse-btn").click();
    const collapsed = await card.locator("g.dnode").count();
    assert.ok(collapsed < 26 + 4, `collapsing hides operators (${collapsed} boxes left)`);
    assert.equal(await card.locator(`g.dnode.collapsed[data-node="${output}"]`).count(), 1);
    assert.deepEqual((await outsideView(card)).outside, [], "the collapsed plan is fitted again");
    await card.locator('button[data-act="expand"]').click();
    assert.equal(await card.locator("g.dnode.op").count(), 26);
    // the large view
    await card.locator('button[data-act="enlarge"]').click();
    const dialog = page.locator("#dagDialog");
    await dialog.waitFor({state: "visible"});
    assert.deepEqual((await outsideView(dialog)).outside, []);
    assert.equal((await outsideView(dialog)).operators, 26);
    await page.click("#dagDialogClose");
    await dialog.waitFor({state: "hidden"});
  });

  await t.test("boxes, words and figures read well: placement in full, no internal ids, clean ticks, nothing drawn over an edge", async () => {
    await pick("matmul");
    await page.waitForFunction(() => document.body.dataset.sweep === "done", null, {timeout: 60_000});
    const placements = await page.$$eval(".alt-card .dag text.placement", (ts) => ts.map((t) => t.textContent));
    assert.ok(placements.length >= 10);
    for (const p of placements) assert.doesNotMatch(p, /…/, `placement written in full: ${p}`);
    // the most expensive tag sits inside its box
    const tags = await page.$$eval(".alt-card g.dnode.hot", (gs) => gs.map((g) => {
      const box = g.querySelector("rect.box").getBBox(), t = g.querySelector(".hot-tag").getBBox();
      return t.x >= box.x && t.y >= box.y && t.x + t.width <= box.x + box.width && t.y + t.height <= box.y + box.height;
    }));
    assert.ok(tags.length >= 1 && tags.every(Boolean), "'most expensive' is drawn inside its box");
    const summary = await page.$eval("#summary", (e) => e.textContent);
    assert.doesNotMatch(summary, /\bn\d+\b/, `the summary names no internal node ids: ${summary}`);
    // every e-graph figure fits its box
    const overflow = await page.$$eval("#egraph .stat-v", (vs) => vs.filter((v) => v.scrollWidth > v.clientWidth + 1).map((v) => v.textContent));
    assert.deepEqual(overflow, []);
    // y ticks: 0, s, 2s, … with s = 1, 2, 2.5 or 5 × 10^k
    const ticks = (await page.$$eval("#sweepChart text.tick", (ts) => ts.map((t) => t.textContent))).map(parseSi);
    assert.ok(ticks.length >= 3);
    const step = ticks[1] - ticks[0];
    assert.equal(ticks[0], 0);
    ticks.forEach((v, i) => assert.ok(Math.abs(v - i * step) <= 1e-9 * step * 100, `evenly spaced ticks: ${ticks}`));
    const mant = step / Math.pow(10, Math.floor(Math.log10(step)));
    assert.ok([1, 2, 2.5, 5].some((m) => Math.abs(m - mant) < 1e-9), `a round tick step: ${step}`);
  });

  await t.test("a bound that is not a number is reported at its field", async () => {
    await pick("matmul");
    const text = (await page.$eval("#program", (ta) => ta.value)).replace(/("array_bounds": \[\s*1000,\s*)1000/, '$1"a"');
    assert.match(text, /"a"/);
    await page.fill("#program", text);
    await page.click("#optimize");
    const box = page.locator("#error");
    await box.waitFor({state: "visible"});
    assert.equal(await box.getAttribute("data-at"), "X.array_bounds[1]");
    assert.match(await box.textContent(), /must be a whole number, found the string "a"/);
    assert.equal(await page.$eval(".editor .backdrop mark", (m) => m.textContent), '"a"', "the editor marks the element at fault");
  });

  await t.test("screenshots at 1024 and 1920 px", async () => {
    for (const [name, width] of [["matmul", 1920], ["matmul", 1024], ["ffnn-amazoncat", 1920], ["ffnn-amazoncat", 1024], ["matmul-common-large-dim", 1920]]) {
      await page.setViewportSize({width, height: 1000});
      await pick(name);
      await page.waitForFunction(() => document.body.dataset.sweep === "done", null, {timeout: 60_000});
      const overflowX = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
      assert.ok(overflowX <= 0, `${name} at ${width} px does not scroll sideways (${overflowX} px)`);
      for (const card of await page.locator(".alt-card").all()) {
        assert.deepEqual((await outsideView(card)).outside, [], `${name} at ${width}: every plan fits its view`);
        const scale = Number(await card.locator(".dag-view").getAttribute("data-scale"));
        assert.ok(scale >= 0.15, `${name} at ${width}: a plan fitted at ${scale}`);
      }
      await page.locator(".alt-card.chosen g.dnode.hot").first().click();
      await page.hover('#sweepChart rect.hover-col[data-n="5"]');
      await page.screenshot({path: resolve(artifacts, `page-${name}-${width}.png`), fullPage: true});
    }
    await page.setViewportSize({width: 1920, height: 1080});
  });

  await t.test("a chain written in the costly order shows the written order beside the chosen one, in its own series", async () => {
    const input = (k) => ({key_bounds: k, array_bounds: [1000, 1000]});
    const join = (l, r) => ({op: "join", left: l, right: r, left_keys: [1], right_keys: [0], kernel: "matMul"});
    const agg = (x) => ({op: "aggregate", input: x, group_by: [0, 2], kernel: "matAdd"});
    const chain = {
      inputs: {X: input([16, 1]), Y: input([1, 16]), V: input([16, 1])},
      nodes: {XY: join("X", "Y"), P: agg("XY"), PV: join("P", "V"), Z: agg("PV")},
      outputs: ["Z"], cluster: {sites: 4, compute_weight: 0.001},
    };
    await page.fill("#program", JSON.stringify(chain, null, 2));
    await page.click("#optimize");
    await settled();
    const alts = await alternatives();
    assert.ok(alts[0].label.endsWith("; order X·(Y·V)"), `the chosen plan is reordered: ${alts[0].label}`);
    const written = alts.find((a) => a.label.endsWith("; order (X·Y)·V"));
    assert.ok(written, `the written order is an alternative: ${alts.map((a) => a.label).join(" | ")}`);
    assert.ok(written.total > 5 * alts[0].total, `the written order costs more: ${written.total} against ${alts[0].total}`);
    const tags = await page.$$eval(".alt-card", (cards) => cards.map((c) => c.dataset.tag));
    assert.equal(new Set(tags).size, tags.length, `every alternative has its own series tag: ${tags}`);
  });

  await t.test("under the time model, an alternative predicted a little faster than the chosen plan says why it lost", async () => {
    // The skewed matmul on 3 sites, with a profile measured over loopback: CMM is predicted 4%
    // faster than the chosen RMM, within the model's 5% resolution, and moves more bytes through memory.
    const input = (k, dim) => ({key_bounds: k, array_bounds: [256, 256], placement: {hash: [dim]}});
    const skewed = {
      inputs: {X: input([2, 64], 0), Y: input([64, 2], 1)},
      nodes: {XY: {op: "join", left: "X", right: "Y", left_keys: [1], right_keys: [0], kernel: "matMul"},
              Z: {op: "aggregate", input: "XY", group_by: [0, 2], kernel: "matAdd"}},
      outputs: ["Z"],
      cluster: {sites: 3, cost_model: "time", profile: {link_bytes_per_second: 5.34e8, site_flops_per_second: 5.58e10,
        memory_bytes_per_second: 2.49e10, latency_seconds: 0.0063, exchange_cpu_bytes_per_second: 5.3e8}},
    };
    await page.fill("#program", JSON.stringify(skewed, null, 2));
    await page.click("#optimize");
    await settled();
    const alts = await alternatives();
    const faster = alts.slice(1).filter((a) => a.total < alts[0].total);
    assert.ok(faster.length >= 1, `an alternative predicted faster than the chosen one: ${JSON.stringify(alts)}`);
    for (const a of faster) assert.ok(a.total >= alts[0].total / 1.05, `within 5%: ${a.total} against ${alts[0].total}`);
    const badges = await page.$$eval(".alt-card .close-call", (bs) => bs.map((b) => b.textContent));
    assert.equal(badges.length, faster.length, `each such card says so: ${badges}`);
    for (const b of badges) assert.match(b, /^0\.9\d× the chosen, within 5% — the chosen plan moves fewer bytes through memory$/);
    assert.match(await page.$eval("#closeCall", (e) => e.textContent), /not told apart/);
    assert.match(await page.$eval("#altCount", (e) => e.textContent), /the chosen first, then cheapest first/);
    // Each operator's share of its plan's cost stays a share under the time model.
    const shares = await page.$$eval(".alt-card g.dnode.op text.share", (ts) => ts.map((t) => t.textContent));
    assert.ok(shares.length > 0 && shares.every((x) => /^\d+%$/.test(x) && Number(x.slice(0, -1)) <= 100), `shares: ${shares}`);
    assert.ok(shares.some((x) => x !== "0%"), `some operator has a share: ${shares}`);
    // A profile measured on sites sharing one machine says so.
    skewed.cluster.profile = {...skewed.cluster.profile, machine_processors: 2, site_threads: 2, machine_sites: 3};
    await page.fill("#program", JSON.stringify(skewed, null, 2));
    await page.click("#optimize");
    await settled();
    assert.match(await page.$eval("#profileInUse", (e) => e.textContent), / · measured as 3 sites of 2 kernel threads sharing 2 processors/);
  });

  await t.test("a broken program shows the API's error beside the editor, pointing at the node", async () => {
    await pick("matmul");
    const broken = await page.$eval("#program", (ta) => ta.value.replace('"matMul"', '"matMull"'));
    assert.match(broken, /matMull/);
    await page.fill("#program", broken);
    await page.click("#optimize");
    const box = page.locator("#error");
    await box.waitFor({state: "visible"});
    const msg = await box.textContent();
    assert.match(msg, /unknown_kernel/);
    assert.match(msg, /matMull/);
    assert.equal(await box.getAttribute("data-at"), "XY.kernel");
    const marked = await page.$eval(".editor .backdrop mark", (m) => m.textContent);
    assert.match(marked, /"kernel":\s*"matMull"/, `the node at fault is highlighted in the editor: ${marked}`);
    const line = await page.$eval(".editor .gutter b", (b) => Number(b.textContent));
    const lineOfKernel = broken.split("\n").findIndex((l) => l.includes("matMull")) + 1;
    assert.equal(line, lineOfKernel, "the gutter marks the line of the node at fault");
    await page.screenshot({path: screenshot, fullPage: true});
  });

  await t.test("no script errors on the page", () => {
    assert.deepEqual(pageErrors, []);
  });
});

test("a server with its own profile and cost model: the page shows them", {skip: process.env.TRA_URL ? "needs its own server" : false}, async () => {
  const {writeFileSync, rmSync} = await import("node:fs");
  const {tmpdir} = await import("node:os");
  const profilePath = resolve(tmpdir(), `tra-page-profile-${process.pid}.json`);
  writeFileSync(profilePath, JSON.stringify({link_bytes_per_second: 3.3e7, site_flops_per_second: 6e10, latency_seconds: 0.016}));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const own = spawn(bin, ["serve", "--addr", `127.0.0.1:${port}`, "--profile", profilePath, "--cost-model", "time"],
    {stdio: ["ignore", "ignore", "ignore"], env: {...process.env, RUST_LOG: "warn"}});
  const p = await browser.newPage({viewport: {width: 1920, height: 1080}});
  try {
    await waitHealthy(url, 30_000);
    await p.goto(url + "/");
    await p.waitForFunction(() => document.querySelectorAll(".alt-card").length >= 1 && window.__tra.answer);
    const program = await p.$eval("#program", (e) => JSON.parse(e.value));
    assert.equal(program.cluster?.cost_model, undefined, "the example names no cost model");
    assert.equal(await p.evaluate(() => window.__tra.answer.stats.cost_model), "time");
    assert.equal(await p.$eval("#costModel", (e) => e.value), "time", "the switch shows the server's model");
    const text = await p.$eval("#profileInUse", (e) => e.textContent);
    assert.match(text, /^profile \(the server's, tra serve --profile\): link 33 MB\/s/, text);
    assert.match(text, /latency 16\.00 ms per exchange/, text);
  } finally {
    await p.close();
    own.kill("SIGTERM");
    rmSync(profilePath, {force: true});
  }
});
