// The web dashboard as a person sees it: headless Chromium (Debian's `chromium`, driven by
// playwright-core) loads the live page during a real `msgbench run mem:// --dashboard`, checks
// that the charts draw data points, then opens `msgbench dashboard` on the same run history
// and checks that the run is listed, searchable, has a run page and compares with another.
// Screenshots (dashboard-live.png, dashboard-history.png, dashboard-compare.png) go to a
// temporary directory, or to docs/ with MSGBENCH_UPDATE_SCREENSHOTS=1 (so a test run leaves the
// tree as it was).
//
//   MSGBENCH_BIN   the msgbench binary (default: $CARGO_TARGET_DIR or ~/.cache/msgbench-target,
//                  debug/msgbench)
//   CHROMIUM       the browser (default /usr/bin/chromium)
"use strict";

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { chromium } = require("playwright-core");

const ROOT = path.resolve(__dirname, "..", "..");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "msgbench-browser-"));
const DOCS = process.env.MSGBENCH_UPDATE_SCREENSHOTS === "1" ? path.join(ROOT, "docs") : tmp;
const TARGET = process.env.CARGO_TARGET_DIR || path.join(os.homedir(), ".cache", "msgbench-target");
const BIN = process.env.MSGBENCH_BIN || path.join(TARGET, "debug", "msgbench");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

const db = path.join(tmp, "runs.db");
const children = new Set();
let browser;

// Starts msgbench; resolves with the child and the dashboard URL it prints on stderr.
function start(args, label) {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, { cwd: tmp, env: { ...process.env, MSGBENCH_RESULTS_DB: db } });
    children.add(child);
    let err = "";
    const timer = setTimeout(() => reject(new Error(`${label}: no dashboard URL within 30 s:\n${err}`)), 30000);
    child.stderr.on("data", (d) => {
      err += d;
      const m = err.match(/dashboard on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve({ child, url: m[1], stderr: () => err }); }
    });
    child.stdout.resume();
    child.on("exit", (code) => {
      children.delete(child);
      clearTimeout(timer);
      reject(new Error(`${label} exited (${code}) before printing its URL:\n${err}`));
    });
  });
}

// Waits for a child to exit; resolves with its exit code.
function exited(child, ms) {
  return new Promise((resolve, reject) => {
    if (child.exitCode !== null) return resolve(child.exitCode);
    const t = setTimeout(() => reject(new Error("timed out waiting for msgbench to finish")), ms);
    child.on("exit", (code) => { clearTimeout(t); resolve(code); });
  });
}

function run(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, { cwd: tmp, env: { ...process.env, MSGBENCH_RESULTS_DB: db } });
    children.add(child);
    let err = "";
    child.stderr.on("data", (d) => { err += d; });
    child.stdout.resume();
    child.on("exit", (code) => {
      children.delete(child);
      code === 0 ? resolve() : reject(new Error(`msgbench ${args.join(" ")} failed (${code}):\n${err}`));
    });
  });
}

// Attributes of every chart box: { id: { points, values } }.
async function chartStats(page) {
  return page.$$eval("[data-chart]", (boxes) => Object.fromEntries(boxes.map((b) => [b.dataset.chart, {
    points: Number(b.dataset.points), values: Number(b.dataset.values),
  }])));
}

before(async () => {
  assert.ok(fs.existsSync(BIN), `no msgbench binary at ${BIN} (cargo build, or set MSGBENCH_BIN)`);
  assert.ok(fs.existsSync(CHROMIUM), `no browser at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM)`);
  fs.mkdirSync(DOCS, { recursive: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Running as root (containers, CI) needs --no-sandbox; the pages are our own.
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
});

after(async () => {
  if (browser) await browser.close();
  for (const c of children) c.kill("SIGTERM");
  fs.rmSync(tmp, { recursive: true, force: true });
});

test("the live page charts a running benchmark", async () => {
  const { child, url } = await start([
    "run", "mem://", "--rate", "4000", "--producers", "2", "--duration", "25s", "--warmup", "1s",
    "--name", "browser-live", "--quiet", "-o", path.join(tmp, "live.jsonl"),
    "--results-db", db, "--dashboard", "127.0.0.1:0",
  ], "msgbench run");
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  // Several seconds of data: throughput and latency charts hold points with values.
  await page.waitForFunction(() => {
    const t = document.querySelector('[data-chart="throughput"]');
    const l = document.querySelector('[data-chart="lat.e2e"]');
    return t && l && Number(t.dataset.points) >= 6 && Number(l.dataset.values) >= 6;
  }, null, { timeout: 30000 });
  const stats = await chartStats(page);
  for (const id of ["throughput", "lat.e2e", "lat.publish", "errors", "integrity", "cpu", "memory"]) {
    assert.ok(stats[id], `no ${id} chart: ${JSON.stringify(stats)}`);
  }
  assert.ok(stats.cpu.values > 0 && stats.memory.values > 0, JSON.stringify(stats));
  // The uPlot instances themselves hold the data.
  const plot = await page.evaluate(() => {
    const u = window.msgbench.charts.throughput;
    return { xs: u.data[0].length, sent: u.data[1].filter((v) => v !== null).slice(-3), series: u.series.map((s) => s.label) };
  });
  assert.ok(plot.xs >= 6, JSON.stringify(plot));
  assert.deepEqual(plot.series, ["time", "sent", "received"]);
  // Measured at 4000 msgs/s: the last full seconds are near it.
  assert.ok(plot.sent.some((v) => v > 3000 && v < 5000), JSON.stringify(plot));
  const tiles = await page.textContent("#tiles");
  assert.match(tiles, /sent/);
  await page.screenshot({ path: path.join(DOCS, "dashboard-live.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
  assert.equal(await exited(child, 90000), 0, "the run did not complete");
});

test("the history lists, finds, shows and compares the run", async () => {
  // A second, short run to compare with.
  await run(["run", "mem://", "--rate", "2000", "--duration", "2s", "--warmup", "0s", "--name", "browser-short",
    "--quiet", "-o", path.join(tmp, "short.jsonl"), "--results-db", db]);
  const { child, url } = await start(["dashboard", "--listen", "127.0.0.1:0", "--results-db", db], "msgbench dashboard");
  const page = await browser.newPage({ viewport: { width: 1440, height: 360 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  const names = await page.$$eval("#runs tr[data-run] td:nth-child(2)", (tds) => tds.map((t) => t.textContent));
  assert.deepEqual(names, ["browser-short", "browser-live"]);
  await page.screenshot({ path: path.join(DOCS, "dashboard-history.png"), fullPage: true });

  // Search narrows the list.
  await page.fill("#q", "name:live");
  await page.waitForFunction(() => document.querySelectorAll("#runs tr[data-run]").length === 1, null, { timeout: 10000 });
  assert.equal(await page.textContent("#runs tr[data-run] td:nth-child(2)"), "browser-live");
  await page.fill("#q", "target:nats");
  await page.waitForFunction(() => document.querySelectorAll("#runs tr[data-run]").length === 0, null, { timeout: 10000 });
  await page.fill("#q", "");
  await page.waitForFunction(() => document.querySelectorAll("#runs tr[data-run]").length === 2, null, { timeout: 10000 });

  // The run page draws the run's charts from its results file.
  await Promise.all([page.waitForNavigation(), page.click("text=browser-live")]);
  await page.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  const stats = await chartStats(page);
  assert.ok(stats.throughput.points >= 20 && stats.throughput.values >= 20, JSON.stringify(stats));
  assert.ok(stats["lat.e2e"].values > 0, JSON.stringify(stats));

  // Compare the two runs.
  await page.goto(url);
  await page.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  const boxes = await page.$$("#runs input[type=checkbox]");
  await boxes[0].check();
  await boxes[1].check();
  await Promise.all([page.waitForNavigation(), page.click("#compare")]);
  await page.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  const sent = await page.$eval('#deltas tr[data-metric="sent"]', (tr) => [...tr.children].map((td) => td.textContent));
  assert.equal(sent[0], "sent");
  assert.ok(["better", "worse", "same"].includes(sent[5]), JSON.stringify(sent));
  const charts = await page.evaluate(() => Object.keys(window.msgbench.charts));
  await page.setViewportSize({ width: 1440, height: 1000 });
  await page.screenshot({ path: path.join(DOCS, "dashboard-compare.png") });
  assert.ok(charts.includes("a:throughput") && charts.includes("b:throughput"), JSON.stringify(charts));
  assert.deepEqual(errors, []);
  await page.close();
  child.kill("SIGTERM");
  await exited(child, 10000);
});

// Run names, tags and error texts are data, never markup: a `<script>` run name and an
// `onerror` attribute in a tag and a warning render as the text they are, on the live page, the
// runs list and the run page, and none of them runs.
test("markup in run names, tags and error texts renders as text", async () => {
  const NAME = '<script>window.__pwned = "name"</script><b id="bold-name">x</b>';
  const TAG = '<img src=x onerror="window.__pwned = \'tag\'">';
  const WARNING = '<img src=x onerror="window.__pwned = \'warning\'"> refused';
  const results = path.join(tmp, "markup.jsonl");
  const hist = path.join(tmp, "markup.db");
  const noMarkup = async (page) => {
    assert.equal(await page.evaluate(() => window.__pwned), undefined, "markup from a run ran");
    assert.equal(await page.$("#bold-name"), null, "markup from a run became an element");
  };

  const { child, url } = await start(["run", "mem://", "--rate", "1000", "--duration", "4s", "--warmup", "0s",
    "--name", NAME, "--tag", TAG, "--quiet", "-o", results, "--no-history", "--dashboard", "127.0.0.1:0"], "msgbench run");
  const live = await browser.newPage();
  const errors = [];
  live.on("pageerror", (e) => errors.push(String(e)));
  await live.goto(url);
  await live.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  await live.waitForFunction((n) => document.getElementById("title").textContent.includes(n), NAME, { timeout: 20000 });
  assert.ok((await live.title()).includes(NAME), await live.title());
  await noMarkup(live);
  await live.close();
  assert.equal(await exited(child, 60000), 0, "the run did not complete");

  // A warning (as a driver's error text would be) with markup, in the file the history reads.
  const lines = fs.readFileSync(results, "utf8").trimEnd().split("\n").map((l) => JSON.parse(l));
  const end = lines.find((r) => r.type === "end");
  end.warnings.push(WARNING);
  lines.splice(lines.length - 1, 0, { type: "event", at_s: 1.0, kind: "error", detail: WARNING });
  fs.writeFileSync(results, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  await run(["dashboard", "--import", results, "--results-db", hist]);
  const { child: dash, url: histUrl } = await start(["dashboard", "--listen", "127.0.0.1:0", "--results-db", hist], "msgbench dashboard");
  const page = await browser.newPage();
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(histUrl);
  await page.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  assert.equal(await page.textContent("#runs tr[data-run] td:nth-child(2)"), NAME);
  assert.equal(await page.textContent("#runs tr[data-run] td:nth-child(3)"), TAG);
  await noMarkup(page);
  await Promise.all([page.waitForNavigation(), page.click("#runs tr[data-run] td:nth-child(2) a")]);
  await page.waitForFunction(() => window.msgbench && window.msgbench.ready, null, { timeout: 20000 });
  assert.ok((await page.textContent("#title")).includes(NAME));
  const warnings = await page.$$eval("ul.warnings li", (lis) => lis.map((l) => l.textContent));
  assert.ok(warnings.includes(WARNING), JSON.stringify(warnings));
  await noMarkup(page);
  assert.deepEqual(errors, []);
  await page.close();
  dash.kill("SIGTERM");
  await exited(dash, 10000);
});
