// Browser test of the page served by `tra serve`: Debian's chromium driven by
// playwright-core (no browser download). Run with `node --test web/test/`
// (scripts/web-test.sh installs what it needs). TRA_BIN names the binary
// (default target/debug/tra, relative to the repository root).

import {test, before, after} from "node:test";
import assert from "node:assert/strict";
import {spawn} from "node:child_process";
import {createServer} from "node:net";
import {existsSync} from "node:fs";
import {dirname, resolve} from "node:path";
import {fileURLToPath} from "node:url";
import {chromium} from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..");
const bin = resolve(root, process.env.TRA_BIN || "target/debug/tra");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
const screenshot = resolve(here, "screenshot.png");

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
    if (server.exitCode !== null) throw new Error(`tra serve exited with ${server.exitCode}:\n${serverLog}`);
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

before(async () => {
  assert.ok(existsSync(bin), `no tra binary at ${bin}: build it (cargo build -p tra-api) or set TRA_BIN`);
  assert.ok(existsSync(chromiumPath), `no chromium at ${chromiumPath}: apt-get install chromium`);
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  server = spawn(bin, ["serve", "--addr", `127.0.0.1:${port}`], {stdio: ["ignore", "pipe", "pipe"], env: {...process.env, RUST_LOG: "warn"}});
  server.stdout.on("data", (d) => { serverLog += d; });
  server.stderr.on("data", (d) => { serverLog += d; });
  await waitHealthy(base, 30_000);
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
    const labels = alts.map((a) => a.label).join(" | ").toLowerCase();
    for (const s of ["broadcast", "cross-product", "replicat"]) assert.ok(labels.includes(s), `a ${s} strategy among ${labels}`);
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
    const rows = await page.$$eval("#runResult tbody tr", (rs) => rs.length);
    assert.ok(rows >= 3, `a row per operator, got ${rows}`);
  });

  await t.test("a broken program shows the API's error beside the editor, pointing at the node", async () => {
    await page.waitForFunction(() => document.body.dataset.busy === "0");
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
