// llama-bench on the Benchmarks page in a real browser against a real daemon playing the 2× RTX
// 5060 Ti rig: a CPU llama.cpp build (llama-server with llama-bench beside it) registered with the
// CLI and a launch profile for a tiny GGUF (context 2048, one thread) that stays stopped. On the
// page: llama-bench picked in the form (a profile the only target), pp 16, tg 8 at depths 0 and 16,
// 2 repetitions, started; its four tests with their tok/s, the profile flags llama-bench left out
// (-c 2048), its command line and charts; the report ZIP (report.md and the charts as PNGs); "Run
// again" filling the form back; a second run compared test by test; and the daemon's refusal while
// the profile's instance runs, shown under Start.
// Needs RIGDECK_LLAMA_SERVER (a built llama-server with llama-bench beside it) and
// RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";
import { PNG_SIGNATURE, unzipTest, zipFiles } from "./zip.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;
/** The llama-bench run started from the form. */
let runId;

const api = (method, path, body) => adminRequest(daemon, method, path, body);
const runRow = (id) => page.locator(`[data-testid="bench-run-row"][data-id="${id}"]`);
const form = () => page.locator('[data-testid="bench-form"]');

/** Waits until `check(answer body)` holds for GET `path`; says what it saw if not. */
async function until(path, check, what, timeoutMs = 30_000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    last = await api("GET", path);
    if (last.status === 200 && check(last.body)) return last.body;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms; GET ${path} answered ${last?.status}:\n${JSON.stringify(last?.body, null, 1).slice(0, 3000)}`);
}

/** Waits until the run's row says it ended; fails with the run's error if it did not end done. */
async function rowEnds(id, timeout) {
  await page.waitForFunction(
    (rid) => {
      const s = document.querySelector(`[data-testid="bench-run-row"][data-id="${rid}"]`)?.getAttribute("data-status");
      return s && s !== "running";
    },
    id,
    { timeout },
  );
  const status = await runRow(id).getAttribute("data-status");
  if (status !== "done") {
    const run = await api("GET", `/api/v1/bench/runs/${id}`);
    throw new Error(`run ${id} ended ${status}: ${run.body?.error}`);
  }
}

/** Waits until a canvas under `selector` has pixels drawn on it. */
async function drawn(selector) {
  await page.waitForFunction(
    (sel) => {
      const c = document.querySelector(`${sel} canvas`);
      if (!c || c.width === 0 || c.height === 0) return false;
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true;
      return false;
    },
    selector,
    { timeout: 10_000 },
  );
}

/** Picks llama-bench in the form and the tiny profile as its target. */
async function pickLlamaBench() {
  await form().locator('[data-testid="bench-kind-llama_bench"]').check();
  await form().locator('[data-testid="bench-llama-fields"]').waitFor();
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="bench-profile"] option')].some((o) => o.value === "tiny"), null, { timeout: 15_000 });
  await form().locator('[data-testid="bench-profile"]').selectOption("tiny");
}

before(async () => {
  daemon = await startDaemon("2x5060ti.json");
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: { ...process.env, RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"), RIGDECK_DATA_DIR: daemon.dataDir, RUST_LOG: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const builds = await api("GET", "/api/v1/engines");
  assert.equal(builds.status, 200, JSON.stringify(builds.body));
  const created = await api("POST", "/api/v1/profiles", {
    name: "tiny",
    engine_build_id: builds.body[0].id,
    model: tinyModel,
    placement: { context: 2048, threads: 1, parallel: 1 },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  browser = await launchChromium();
  const context = await browser.newContext({ viewport: { width: 1500, height: 1000 }, acceptDownloads: true });
  page = await context.newPage();
  page.on("pageerror", (e) => console.log(`page error: ${e.message}`));
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  if (daemon) {
    const runs = await api("GET", "/api/v1/bench/runs").catch(() => null);
    for (const r of runs?.body ?? []) if (r.status === "running") await api("POST", `/api/v1/bench/runs/${r.id}/cancel`, {}).catch(() => {});
    const list = await api("GET", "/api/v1/instances").catch(() => null);
    for (const v of list?.body ?? []) {
      if (["starting", "loading", "ready"].includes(v.phase)) await api("POST", `/api/v1/instances/${v.name}/stop`).catch(() => {});
    }
  }
  await browser?.close();
  await daemon?.stop();
});

test("llama-bench is picked in the form, run on the stopped profile, and shows its tests, the dropped flags and charts", async () => {
  await page.locator('nav a[href="#/bench"]').click();
  await page.locator('[data-testid="bench-page"]').waitFor({ timeout: 15_000 });
  await pickLlamaBench();
  // A profile is the only target llama-bench takes; the speed and probe fields are gone.
  assert.equal(await form().locator('[data-testid="bench-target-profile"]').count(), 1);
  assert.equal(await form().locator('[data-testid="bench-target-instance"]').count(), 0);
  assert.equal(await form().locator('[data-testid="bench-shapes"]').count(), 0);
  assert.match(await form().locator('[data-testid="bench-llama-note"]').textContent(), /no HTTP/);
  assert.equal(await form().locator('[data-testid="bench-llama-prompts"]').inputValue(), "512", "llama-bench's defaults");
  assert.equal(await form().locator('[data-testid="bench-llama-gens"]').inputValue(), "128");
  assert.equal(await form().locator('[data-testid="bench-llama-depths"]').inputValue(), "0");
  assert.equal(await form().locator('[data-testid="bench-llama-repetitions"]').inputValue(), "5");
  await form().locator('[data-testid="bench-name"]').fill("tiny lb");
  await form().locator('[data-testid="bench-llama-prompts"]').fill("16");
  await form().locator('[data-testid="bench-llama-gens"]').fill("8");
  await form().locator('[data-testid="bench-llama-depths"]').fill("0,16");
  await form().locator('[data-testid="bench-llama-repetitions"]').fill("2");
  assert.equal((await form().locator('[data-testid="bench-plan"]').textContent()).trim(), "4 tests × 2 repetitions, inside the engine");

  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/runs"));
  await form().locator('[data-testid="bench-start"]').click();
  const answer = await sent;
  assert.equal(answer.status(), 201, await answer.text());
  const body = JSON.parse(await answer.text());
  runId = body.id;
  assert.equal(body.kind, "llama_bench");
  assert.deepEqual(body.target, { kind: "profile", name: "tiny" });
  assert.deepEqual(body.spec, { prompt_tokens: [16], gen_tokens: [8], depths: [0, 16], repetitions: 2 });
  assert.equal(body.runs_total, 4);
  await page.waitForFunction((id) => location.hash === `#/bench/${id}`, runId, { timeout: 10_000 });
  assert.equal(await runRow(runId).getAttribute("data-kind"), "llama_bench");
  await rowEnds(runId, 180_000);

  const detail = page.locator(`[data-testid="bench-detail"][data-id="${runId}"]`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="bench-llama-tests"] [data-testid="bench-llama-test-row"]').length === 4, null, { timeout: 15_000 });
  const rows = detail.locator('[data-testid="bench-llama-test-row"]');
  const labels = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-test")));
  assert.deepEqual([...labels].sort(), ["pp16 @ d0", "pp16 @ d16", "tg8 @ d0", "tg8 @ d16"]);
  // Each cell's figure is its first line (the spread is under it).
  for (let i = 0; i < 4; i++) {
    const [label, depth, reps, tps, meanStdev] = await rows.nth(i).locator("td").evaluateAll((tds) => tds.map((td) => (td.childNodes[0]?.textContent ?? "").trim()));
    assert.match(label, /^(pp16|tg8) @ d(0|16)$/);
    assert.equal(depth, label.endsWith("d16") ? "16" : "0");
    assert.equal(reps, "2", `${label} ran its 2 repetitions`);
    assert.ok(Number(tps) > 0, `${label} has a median tok/s: ${tps}`);
    assert.match(meanStdev, /^\d+(\.\d+)? ± \d+(\.\d+)?$/);
  }
  // The flags llama-bench left out, its command line, and what it ran on.
  assert.match(await detail.locator('[data-testid="bench-llama-dropped"]').textContent(), /-c 2048/);
  const command = await detail.locator('[data-testid="bench-llama-command"]').textContent();
  assert.match(command, /llama-bench/);
  assert.match(command, /-p 16 -n 8 -d 0,16 -r 2 -o json/);
  assert.match(await detail.locator('[data-testid="bench-llama-build"]').textContent(), /CPU/);
  assert.match(await detail.locator('[data-testid="bench-spec"]').textContent(), /pp 16, tg 8 at depths 0 and 16, 2 repetitions each/);
  assert.equal(await detail.locator('[data-testid="bench-steps"]').count(), 0, "no speed benchmark steps");
  assert.equal(await detail.locator('[data-testid="bench-estimated"]').count(), 0, "no prompt estimates to warn of");
  // Charts: tok/s against depth and the repetitions' boxes, for pp and tg.
  await drawn('[data-testid="bench-llama-chart-pp-depth"]');
  await drawn('[data-testid="bench-llama-chart-tg-depth"]');
  await drawn('[data-testid="bench-llama-box-pp"]');
  await drawn('[data-testid="bench-llama-box-tg"]');
  // The list says what it measured.
  assert.equal((await runRow(runId).locator('[data-testid="bench-run-llama"]').textContent()).trim(), "pp16 · tg8 @ d0, 16");
  // CSV: a row per repetition.
  const csv = await api("GET", `/api/v1/bench/runs/${runId}/export?format=csv`);
  assert.equal(csv.status, 200);
  assert.equal(csv.body.trim().split("\n").length, 1 + 4 * 2);
  mkdirSync(artifacts, { recursive: true });
  await detail.locator('[data-testid="bench-run-head"]').evaluate((el) => el.scrollIntoView({ block: "start" }));
  await page.screenshot({ path: join(artifacts, "llama-bench.png"), fullPage: false });
});

test("the report ZIP holds the Markdown report and the charts shown, as PNGs", async () => {
  const detail = page.locator(`[data-testid="bench-detail"][data-id="${runId}"]`);
  const download = page.waitForEvent("download");
  await detail.locator('[data-testid="bench-export-zip"]').click();
  const file = await download;
  assert.match(file.suggestedFilename(), /^benchmark-\d+-tiny-lb-report\.zip$/);
  const path = await file.path();
  const files = zipFiles(path);
  const names = [...files.keys()];
  assert.equal(names[0], "report.md");
  const pngs = names.filter((n) => /^charts\/[^/]+\.png$/.test(n));
  // pp and tg each: tok/s against depth and the repetitions' boxes.
  assert.ok(pngs.length >= 4, `the charts as PNGs: ${names}`);
  for (const n of pngs) assert.ok(files.get(n).subarray(0, 8).equals(PNG_SIGNATURE), `${n} is a PNG`);
  const md = files.get("report.md").toString("utf8");
  assert.match(md, /^# tiny lb/);
  assert.match(md, /Profile flags llama-bench has no use for/);
  assert.match(md, /\| pp16 @ d0 \|/);
  assert.match(md, /\n## Charts\n/);
  for (const n of pngs) assert.ok(md.includes(`](${n})`), `report.md shows ${n}`);
  const checked = unzipTest(path);
  if (checked != null) assert.match(checked, /No errors detected/);
  mkdirSync(artifacts, { recursive: true });
  copyFileSync(path, join(artifacts, "llama-bench-report.zip"));
});

test("Run again puts the run's llama-bench settings back in the form", async () => {
  await form().locator('[data-testid="bench-kind-serving"]').check();
  await page.locator('[data-testid="bench-run-again"]').click();
  await form().locator('[data-testid="bench-llama-fields"]').waitFor({ timeout: 5_000 });
  assert.equal(await form().locator('[data-testid="bench-kind-llama_bench"]').isChecked(), true);
  assert.equal(await form().locator('[data-testid="bench-name"]').inputValue(), "tiny lb");
  assert.equal(await form().locator('[data-testid="bench-profile"]').inputValue(), "tiny");
  assert.equal(await form().locator('[data-testid="bench-llama-prompts"]').inputValue(), "16");
  assert.equal(await form().locator('[data-testid="bench-llama-gens"]').inputValue(), "8");
  assert.equal(await form().locator('[data-testid="bench-llama-depths"]').inputValue(), "0,16");
  assert.equal(await form().locator('[data-testid="bench-llama-repetitions"]').inputValue(), "2");
  assert.equal((await form().locator('[data-testid="bench-plan"]').textContent()).trim(), "4 tests × 2 repetitions, inside the engine");
});

test("a second llama-bench run is compared with the first, test by test", async () => {
  const started = await api("POST", "/api/v1/bench/runs", {
    name: "tiny lb again",
    kind: "llama_bench",
    target: { kind: "profile", name: "tiny" },
    llama_bench: { prompt_tokens: [16], gen_tokens: [8], depths: [0], repetitions: 2 },
  });
  assert.equal(started.status, 201, JSON.stringify(started.body));
  const secondId = started.body.id;
  await runRow(secondId).waitFor({ timeout: 10_000 });
  await rowEnds(secondId, 180_000);
  await runRow(runId).locator('[data-testid="bench-pick"]').check();
  await runRow(secondId).locator('[data-testid="bench-pick"]').check();
  const compare = page.locator('[data-testid="bench-compare"]');
  const rows = compare.locator('[data-testid="bench-compare-llama-table"] [data-testid="bench-compare-llama-row"]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="bench-compare-llama-row"]').length === 2, null, { timeout: 10_000 });
  assert.deepEqual(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-test"))), ["pp16 @ d0", "tg8 @ d0"]);
  const cells = await rows.first().locator("td").allTextContents();
  assert.match(cells[1], /^\s*\d+(\.\d+)? tok\/s/);
  assert.match(cells[2], /\d+\.\d\d×/);
  assert.match(await compare.textContent(), /2 tests only one of the runs measured are left out/);
  assert.equal(await runRow(runId).locator(".base").count(), 1, "the first picked is the base");
});

test("the daemon's refusal shows under Start while the profile's instance runs", async () => {
  const started = await api("POST", "/api/v1/profiles/tiny/start", {});
  assert.equal(started.status, 200, JSON.stringify(started.body));
  await until("/api/v1/instances", (list) => list.some((v) => v.name === "tiny" && ["starting", "loading", "ready"].includes(v.phase)), "the tiny instance starts", 60_000);
  await pickLlamaBench();
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/runs"));
  await form().locator('[data-testid="bench-start"]').click();
  assert.equal((await sent).status(), 400);
  const refusal = form().locator('[data-testid="bench-start-error"]');
  await refusal.waitFor({ timeout: 5_000 });
  assert.equal(await refusal.getAttribute("data-code"), "invalid_benchmark");
  assert.match(await refusal.textContent(), /stop the instance first/);
});
