// The Benchmarks page in a real browser against a real daemon playing the 2× RTX 5060 Ti rig: a CPU
// llama-server registered with the CLI and a launch profile for a tiny GGUF (context 4096, one
// thread, two slots) started through the API and waited for. On the page: a speed benchmark filled
// in and started against the instance (32:16 at 1 and 2 streams, 2 warm runs), its progress, both
// steps with their numbers and cold runs, a drawn chart, the same after a reload, its report ZIP
// (report.md and the charts shown as PNGs); a quality probe
// (max tokens 24) that the tiny model's random weights fail entirely — "passed 0 of 30" and the 30
// answers — with its pass rate beside the speed in "By target" and its Markdown report downloaded;
// and a second speed benchmark (started through the API) compared with the first; the run's head
// never says "Prompt lengths estimated" for a run whose prompts the engine counted (not even at
// its start), a running benchmark shows the time it has left, and "Quick check" starts one shape,
// one stream and 3 warm runs in one click once the target is chosen.
// Needs RIGDECK_LLAMA_SERVER (a built llama-server) and RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";
import { PNG_SIGNATURE, unzipTest, zipFiles } from "./zip.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;
/** The runs the tests make: the speed benchmark from the form, the quality probe, the second one. */
let speedId;
let probeId;
let secondId;

const api = (method, path, body) => adminRequest(daemon, method, path, body);

/** Waits until `check(answer body)` holds for GET `path` (admin token); says what it saw if not. */
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

/** The run's row in the runs list. */
const runRow = (id) => page.locator(`[data-testid="bench-run-row"][data-id="${id}"]`);

/** Waits until the run's row says the run ended; fails with the run's error if it did not end done. */
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

/** Records, at every change of the page, the runs list's statuses and progress texts. */
async function recordProgress() {
  await page.evaluate(() => {
    window.__progress = [];
    const observer = new MutationObserver(() => {
      for (const row of document.querySelectorAll('[data-testid="bench-run-row"]')) {
        const text = row.querySelector('[data-testid="bench-progress"]')?.textContent ?? null;
        const entry = `${row.getAttribute("data-id")} ${row.getAttribute("data-status")} ${text ?? ""}`.trim();
        if (window.__progress.at(-1) !== entry && !window.__progress.includes(entry)) window.__progress.push(entry);
      }
      if (document.querySelector('[data-testid="bench-estimated"]')) window.__estimatedSeen = true;
      const left = document.querySelector('[data-testid="bench-time-left"]')?.textContent;
      if (left) window.__timeLeftSeen = left;
    });
    observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
    window.__stopProgress = () => {
      observer.disconnect();
      return window.__progress;
    };
  });
}

/** Whether a canvas under `selector` has pixels drawn on it. */
async function drawn(selector) {
  return page.evaluate((sel) => {
    const canvas = document.querySelector(`${sel} canvas`);
    if (!canvas || canvas.width === 0 || canvas.height === 0) return false;
    const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 3; i < data.length; i += 4) if (data[i] !== 0) return true;
    return false;
  }, selector);
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
    placement: { context: 4096, threads: 1, parallel: 2 },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const started = await api("POST", "/api/v1/profiles/tiny/start", {});
  assert.equal(started.status, 200, JSON.stringify(started.body));
  await until("/api/v1/instances", (list) => list.some((v) => v.name === "tiny" && v.phase === "ready"), "the tiny instance is ready", 120_000);
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

test("a speed benchmark is filled in, started against the instance, and shows its steps, cold runs and charts", async () => {
  await page.locator('nav a[href="#/bench"]').click();
  await page.locator('[data-testid="bench-page"]').waitFor({ timeout: 15_000 });
  await page.locator('[data-testid="bench-runs-empty"]').waitFor({ timeout: 15_000 });
  const form = page.locator('[data-testid="bench-form"]');
  assert.equal(await form.locator('[data-testid="bench-kind-serving"]').isChecked(), true, "a speed benchmark by default");
  // The quick check waits for a target.
  if (!(await form.locator('[data-testid="bench-quick-check"]').isEnabled())) {
    assert.equal(await form.locator('[data-testid="bench-quick-plan"]').textContent(), "Pick a target first.");
  }
  // The ready instance is offered (and picked, the only one).
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="bench-instance"] option')].some((o) => o.value === "tiny"), null, { timeout: 15_000 });
  await form.locator('[data-testid="bench-target-instance"]').check();
  await form.locator('[data-testid="bench-instance"]').selectOption("tiny");
  await form.locator('[data-testid="bench-name"]').fill("tiny speed");
  await form.locator('[data-testid="bench-shapes"]').fill("32:16");
  await form.locator('[data-testid="bench-depths"]').fill("0");
  await form.locator('[data-testid="bench-mode-concurrency"]').check();
  await form.locator('[data-testid="bench-concurrency"]').fill("1,2");
  await form.locator('[data-testid="bench-warm-runs"]').fill("2");
  assert.equal((await form.locator('[data-testid="bench-plan"]').textContent()).trim(), "2 steps × (1 cold + 2 warm) = 6 runs");

  await recordProgress();
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/runs"));
  await form.locator('[data-testid="bench-start"]').click();
  const answer = await sent;
  assert.equal(answer.status(), 201, await answer.text());
  const body = JSON.parse(await answer.text());
  speedId = body.id;
  assert.equal(body.kind, "serving");
  assert.deepEqual(body.spec.shapes, [{ prompt_tokens: 32, output_tokens: 16 }]);
  assert.deepEqual(body.spec.concurrency, [1, 2]);
  assert.equal(body.spec.warm_runs, 2);
  assert.equal(body.runs_total, 6);
  // The page opens the run.
  await page.waitForFunction((id) => location.hash === `#/bench/${id}`, speedId, { timeout: 10_000 });
  await page.locator(`[data-testid="bench-detail"][data-id="${speedId}"]`).waitFor({ timeout: 10_000 });

  await rowEnds(speedId, 60_000);
  const { estimatedSeen, timeLeftSeen } = await page.evaluate(() => ({ estimatedSeen: window.__estimatedSeen ?? false, timeLeftSeen: window.__timeLeftSeen ?? null }));
  assert.equal(estimatedSeen, false, "the engine counted the prompts: 'Prompt lengths estimated' is never shown, not even at the start");
  assert.equal((await api("GET", `/api/v1/bench/runs/${speedId}`)).body.exact_prompts, true);
  assert.match(timeLeftSeen ?? "", /left$/, "the running benchmark showed the time it had left");
  const seen = await page.evaluate(() => window.__stopProgress());
  assert.ok(seen.includes(`${speedId} running`) || seen.some((s) => s.startsWith(`${speedId} running`)), `the run was shown running: ${JSON.stringify(seen)}`);
  const progress = seen.filter((s) => new RegExp(`^${speedId} running \\d+ / 6 runs$`).test(s));
  assert.ok(progress.length >= 1, `its progress was shown as runs done of 6: ${JSON.stringify(seen)}`);

  // Both steps with numbers; each step's cold run in its own row.
  const detail = page.locator(`[data-testid="bench-detail"][data-id="${speedId}"]`);
  await page.waitForFunction(
    () => {
      const rows = document.querySelectorAll('[data-testid="bench-steps"] [data-testid="bench-step-row"]');
      return rows.length === 2 && [...rows].every((r) => !r.querySelector(".chip"));
    },
    null,
    { timeout: 15_000 },
  );
  const steps = detail.locator('[data-testid="bench-step-row"]');
  const labels = await steps.evaluateAll((rows) => rows.map((r) => r.querySelector("td")?.textContent.replace(/\s+/g, " ").trim()));
  assert.deepEqual(labels, ["1. 32:16, 1 stream", "2. 32:16, 2 streams"]);
  // Each cell's figure is its first line (the spread or percentiles are under it).
  const figures = (row) => row.locator("td").evaluateAll((tds) => tds.map((td) => (td.childNodes[0]?.textContent ?? "").trim()));
  for (let i = 0; i < 2; i++) {
    const [, runs, aggregate, , stream, ttft] = await figures(steps.nth(i));
    assert.equal(runs, "2 warm", `step ${i + 1} summarizes its 2 warm runs`);
    assert.match(aggregate, /^\d+(\.\d+)?$/, `step ${i + 1} has an aggregate tok/s`);
    assert.ok(Number(aggregate) > 0, `step ${i + 1}'s aggregate tok/s is positive: ${aggregate}`);
    assert.ok(Number(stream) > 0, `step ${i + 1}'s per-stream tok/s is positive: ${stream}`);
    assert.match(ttft, /^\d+(\.\d+)? (ms|s)$/, `step ${i + 1} has a TTFT: ${ttft}`);
  }
  const cold = detail.locator('[data-testid="bench-cold-row"]');
  assert.equal(await cold.count(), 2, "each step's cold run is shown");
  const [coldLabel, coldRuns, coldAggregate] = await figures(cold.first());
  assert.match(coldLabel, /cold run/);
  assert.equal(coldRuns, "1");
  assert.ok(Number(coldAggregate) > 0, `the cold run has its own aggregate tok/s: ${coldAggregate}`);

  // The chart against the load is drawn.
  await page.locator('[data-testid="bench-chart-tps-load"] canvas').waitFor({ timeout: 10_000 });
  await page.waitForFunction(
    () => {
      const c = document.querySelector('[data-testid="bench-chart-tps-load"] canvas');
      if (!c || c.width === 0) return false;
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true;
      return false;
    },
    null,
    { timeout: 10_000 },
  );
  assert.equal(await drawn('[data-testid="bench-chart-tps-load"]'), true);
  assert.match(await runRow(speedId).textContent(), /tiny speed/);
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, "bench-speed.png") });
});

test("a reload shows the same run, from the daemon", async () => {
  const before = await page.locator('[data-testid="bench-step-row"]').allTextContents();
  await page.reload();
  await page.locator('[data-testid="bench-page"]').waitFor({ timeout: 15_000 });
  await page.locator(`[data-testid="bench-detail"][data-id="${speedId}"]`).waitFor({ timeout: 15_000 });
  assert.equal(await runRow(speedId).getAttribute("data-status"), "done");
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="bench-step-row"]').length === 2, null, { timeout: 10_000 });
  assert.deepEqual(await page.locator('[data-testid="bench-step-row"]').allTextContents(), before);
  assert.equal(await page.locator('[data-testid="bench-cold-row"]').count(), 2);
  await page.locator('[data-testid="bench-chart-tps-load"] canvas').waitFor({ timeout: 10_000 });
});

test("the report ZIP holds the Markdown report and the charts shown, as PNGs", async () => {
  const detail = page.locator(`[data-testid="bench-detail"][data-id="${speedId}"]`);
  await page.locator('[data-testid="bench-chart-tps-load"] canvas').waitFor({ timeout: 10_000 });
  const download = page.waitForEvent("download");
  await detail.locator('[data-testid="bench-export-zip"]').click();
  const file = await download;
  assert.match(file.suggestedFilename(), /^benchmark-\d+-tiny-speed-report\.zip$/);
  const path = await file.path();
  const files = zipFiles(path);
  const names = [...files.keys()];
  assert.equal(names[0], "report.md");
  // tok/s against the load, the runs' box plot, TTFT and E2E at least.
  assert.ok(names.includes("charts/tps-load.png"), `the chart against the load: ${names}`);
  const pngs = names.filter((n) => /^charts\/[^/]+\.png$/.test(n));
  assert.ok(pngs.length >= 4, `the charts as PNGs: ${names}`);
  for (const n of pngs) assert.ok(files.get(n).subarray(0, 8).equals(PNG_SIGNATURE), `${n} is a PNG`);
  const md = files.get("report.md").toString("utf8");
  assert.match(md, /^# tiny speed/);
  assert.match(md, /\n## Charts\n/);
  for (const n of pngs) assert.ok(md.includes(`](${n})`), `report.md shows ${n}`);
  const checked = unzipTest(path);
  if (checked != null) assert.match(checked, /No errors detected/);
});

test("a quality probe: the tiny model passes none of 10 generated questions, every answer shown with the interval", async () => {
  const form = page.locator('[data-testid="bench-form"]');
  await form.locator('[data-testid="bench-kind-quality"]').check();
  await form.locator('[data-testid="bench-probe-fields"]').waitFor();
  assert.equal(await form.locator('[data-testid="bench-shapes"]').count(), 0, "the speed fields are gone");
  assert.match(await form.locator('[data-testid="bench-probe-fields"]').textContent(), /a few thousand tokens/);
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="bench-instance"] option')].some((o) => o.value === "tiny"), null, { timeout: 15_000 });
  await form.locator('[data-testid="bench-instance"]').selectOption("tiny");
  await form.locator('[data-testid="bench-name"]').fill("tiny probe");
  await form.locator('[data-testid="bench-probe-max-tokens"]').fill("24");
  await form.locator('[data-testid="bench-probe-count"]').fill("10");
  assert.equal((await form.locator('[data-testid="bench-plan"]').textContent()).trim(), "10 questions from seed 1, 4 at once, up to 24 tokens each");

  await recordProgress();
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/runs"));
  await form.locator('[data-testid="bench-start"]').click();
  const answer = await sent;
  assert.equal(answer.status(), 201, await answer.text());
  const body = JSON.parse(await answer.text());
  probeId = body.id;
  assert.equal(body.kind, "quality");
  assert.equal(body.spec.max_tokens, 24);
  assert.equal(body.runs_total, 10);
  assert.deepEqual([body.spec.count, body.spec.seed], [10, 1]);
  await page.waitForFunction((id) => location.hash === `#/bench/${id}`, probeId, { timeout: 10_000 });
  assert.equal(await runRow(probeId).getAttribute("data-kind"), "quality");

  await rowEnds(probeId, 90_000);
  const seen = await page.evaluate(() => window.__stopProgress());
  const answered = seen.filter((s) => new RegExp(`^${probeId} running \\d+ / 10 answered$`).test(s));
  assert.ok(answered.length >= 1, `its progress was shown as questions answered of 10: ${JSON.stringify(seen)}`);

  // The list's headline and the detail's.
  await page.waitForFunction((id) => document.querySelector(`[data-testid="bench-run-row"][data-id="${id}"] [data-testid="bench-run-quality"]`)?.textContent.includes("of 10"), probeId, { timeout: 10_000 });
  // Ten wrong answers still leave room for a pass rate up to 28 %: the interval says so.
  assert.equal((await runRow(probeId).locator('[data-testid="bench-run-quality"]').textContent()).trim(), "passed 0 of 10: 0 % (95 % interval 0–28 %)");
  const detail = page.locator(`[data-testid="bench-detail"][data-id="${probeId}"]`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="bench-answers"] [data-testid="bench-answer-row"]').length === 10, null, { timeout: 15_000 });
  assert.equal((await detail.locator('[data-testid="bench-quality-headline"]').textContent()).trim(), "passed 0 of 10: 0 % (95 % interval 0–28 %)");
  assert.equal((await detail.locator('[data-testid="bench-pass-rate"]').textContent()).trim(), "0 %");
  assert.equal(await detail.locator('[data-testid="bench-answer-fail"]').count(), 10);
  assert.equal(await detail.locator('[data-testid="bench-answer-error"]').count(), 0, "no request failed");
  assert.equal(await detail.locator('[data-testid="bench-answer-pass"]').count(), 0);
  const categories = await detail.locator('[data-testid="bench-quality-category"]').evaluateAll((rows) => rows.map((r) => r.getAttribute("data-category")));
  assert.deepEqual(categories, ["arithmetic", "units", "dates", "strings", "code"]);
  // Two wrong answers per category: each rate's interval runs from 0 to 66 %.
  const intervals = await detail.locator('[data-testid="bench-quality-category-interval"]').allTextContents();
  assert.deepEqual(intervals.map((t) => t.trim()), Array(5).fill("0–66 %"));
  assert.match(await detail.locator('[data-testid="bench-quality-seed"]').textContent(), /10 generated questions .* from seed 1/);
  const stored = (await api("GET", `/api/v1/bench/runs/${probeId}`)).body.answers[0];
  const first = await detail.locator('[data-testid="bench-answer-row"]').first().locator("td").allTextContents();
  assert.match(first[0].trim(), /^arithmetic-1/);
  assert.ok(stored.question.length > 0 && first[0].includes(stored.question.slice(0, 20)), `the question is shown: ${first[0]}`);
  assert.equal(first[2].trim(), stored.expected);
  // 24 tokens of random text: the reply's end opens under its row.
  const tail = detail.locator('[data-testid="bench-answer-row"]').first().locator("details");
  assert.equal(await tail.count(), 1, "the reply's end is there to open");
  assert.equal(await tail.locator('[data-testid="bench-answer-tail"]').isVisible(), false, "closed at first");
  await tail.locator("summary").click();
  await tail.locator('[data-testid="bench-answer-tail"]').waitFor();
  assert.ok((await tail.locator('[data-testid="bench-answer-tail"]').textContent()).length > 0);
  // No speed parts for a probe; CSV is a speed benchmark's export.
  assert.equal(await detail.locator('[data-testid="bench-steps"]').count(), 0);
  assert.equal(await detail.locator('[data-testid="bench-charts"]').count(), 0);
  assert.equal(await detail.locator('[data-testid="bench-export-csv"]').count(), 0);
  assert.equal(await detail.locator('[data-testid="bench-export-zip"]').count(), 0, "a probe's report is its Markdown");
  assert.match(await detail.locator('[data-testid="bench-spec"]').textContent(), /10 questions at temperature 0, up to 24 tokens per reply/);

  // By target: the instance's speed beside its pass rate.
  const target = page.locator('[data-testid="bench-by-target-row"][data-target="tiny"]');
  await target.waitFor({ timeout: 10_000 });
  assert.ok(Number.parseFloat(await target.locator('[data-testid="bench-by-target-speed"]').textContent()) > 0);
  assert.equal((await target.locator('[data-testid="bench-by-target-pass-rate"]').textContent()).trim(), "0 %");

  // The Markdown report downloads, and the daemon serves it.
  const download = page.waitForEvent("download");
  await detail.locator('[data-testid="bench-export-md"]').click();
  const file = await download;
  assert.match(file.suggestedFilename(), /^benchmark-\d+-tiny-probe\.md$/);
  const text = readFileSync(await file.path(), "utf8");
  assert.match(text, /^# tiny probe/);
  assert.match(text, /Quality probe \(10 generated questions, seed 1\), at temperature 0: passed 0 of 10: 0 % \(95 % interval 0–28 %\)/);
  const md = await api("GET", `/api/v1/bench/runs/${probeId}/export?format=md`);
  assert.equal(md.status, 200);
  assert.match(md.headers.get("content-type"), /text\/markdown/);
  await detail.locator('[data-testid="bench-run-head"]').evaluate((el) => el.scrollIntoView({ block: "start" }));
  await page.screenshot({ path: join(artifacts, "bench-probe.png") });
});

test("a second speed benchmark is compared with the first", async () => {
  const started = await api("POST", "/api/v1/bench/runs", {
    name: "tiny speed again",
    target: { kind: "instance", name: "tiny" },
    spec: { shapes: [{ prompt_tokens: 32, output_tokens: 16 }], depths: [0], concurrency: [1], warm_runs: 1 },
  });
  assert.equal(started.status, 201, JSON.stringify(started.body));
  secondId = started.body.id;
  // The page learns of it from the daemon's events.
  await runRow(secondId).waitFor({ timeout: 10_000 });
  await rowEnds(secondId, 60_000);

  await runRow(speedId).locator('[data-testid="bench-pick"]').check();
  await runRow(secondId).locator('[data-testid="bench-pick"]').check();
  const compare = page.locator('[data-testid="bench-compare"]');
  await compare.waitFor({ timeout: 10_000 });
  const rows = compare.locator('[data-testid="bench-compare-table"] [data-testid="bench-compare-row"]');
  await rows.first().waitFor();
  assert.equal(await rows.count(), 1, "one point in common");
  const cells = await rows.first().locator("td").evaluateAll((tds) => tds.map((td) => (td.childNodes[0]?.textContent ?? "").trim()));
  assert.equal(cells[0], "32:16, 1 stream");
  assert.ok(Number(cells[1]) > 0 && Number(cells[4]) > 0, `both runs' aggregate tok/s: ${cells}`);
  assert.match(await rows.first().locator('[data-testid="bench-ratio"]').textContent(), /^\d+\.\d\d×$/);
  assert.match(await compare.textContent(), /1 point only one of the runs measured is left out/);
  // A probe picked as well stays out of the speed table; a second probe sets the pass rates side by side.
  await runRow(probeId).locator('[data-testid="bench-pick"]').check();
  await compare.locator('[data-testid="bench-compare-one-probe"]').waitFor();
  assert.equal(await rows.count(), 1);
  const probe = await api("POST", "/api/v1/bench/runs", { name: "tiny probe again", kind: "quality", target: { kind: "instance", name: "tiny" }, probe: { max_tokens: 16, count: 10 } });
  assert.equal(probe.status, 201, JSON.stringify(probe.body));
  await runRow(probe.body.id).waitFor({ timeout: 10_000 });
  await rowEnds(probe.body.id, 60_000);
  await runRow(probe.body.id).locator('[data-testid="bench-pick"]').check();
  const rates = compare.locator('[data-testid="bench-compare-probes"] [data-testid="bench-compare-probe-row"]');
  await rates.first().waitFor({ timeout: 10_000 });
  assert.deepEqual(await rates.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-key"))), ["overall", "arithmetic", "units", "dates", "strings", "code"]);
  const overall = await rates.first().locator("td").allTextContents();
  assert.match(overall[1], /0 %\s*\(0\/10\)\s*95 % interval 0–28 %/);
  assert.match(overall[2], /0 %\s*\(0\/10\)\s*95 % interval 0–28 %\s*±0 pts/);
  // The same seed asked the same questions: paired, nothing tells the two apart.
  const verdict = compare.locator(`[data-testid="bench-compare-paired"][data-id="${probe.body.id}"] [data-testid="bench-compare-verdict"]`);
  await verdict.waitFor({ timeout: 10_000 });
  assert.equal((await verdict.textContent()).trim(), "not distinguishable (p = 1)");
  const discordant = compare.locator(`[data-testid="bench-compare-paired"][data-id="${probe.body.id}"] [data-testid="bench-compare-discordant"]`);
  assert.equal((await discordant.textContent()).trim(), `only #${probeId} passed 0, only #${probe.body.id} passed 0, of 10 shared`);
  // Each comparison has its own base: the first picked speed benchmark and the first picked probe.
  assert.equal(await runRow(speedId).locator(".base").count(), 1);
  assert.equal(await runRow(probeId).locator(".base").count(), 1);
  assert.equal(await runRow(secondId).locator(".base").count(), 0);

  await compare.scrollIntoViewIfNeeded();
  const shot = join(artifacts, "bench.png");
  await page.screenshot({ path: shot });
  console.log(`benchmarks screenshot saved to ${shot}`);
});

test("a quick check starts in one click once the target is chosen", async () => {
  await page.goto(`${daemon.base}/#/bench`);
  const form = page.locator('[data-testid="bench-form"]');
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="bench-instance"] option')].some((o) => o.value === "tiny"), null, { timeout: 15_000 });
  await form.locator('[data-testid="bench-target-instance"]').check();
  await form.locator('[data-testid="bench-instance"]').selectOption("tiny");
  assert.equal(
    await form.locator('[data-testid="bench-quick-plan"]').textContent(),
    "A 512-token prompt and a 128-token reply, one stream: 1 step × (1 cold + 3 warm) = 4 runs (seconds on a GPU, a minute or two on a CPU).",
  );
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/runs"));
  const t0 = Date.now();
  await form.locator('[data-testid="bench-quick-check"]').click();
  const answer = await sent;
  assert.equal(answer.status(), 201, await answer.text());
  const body = JSON.parse(await answer.text());
  assert.equal(body.name, "Quick check");
  assert.deepEqual(body.spec.shapes, [{ prompt_tokens: 512, output_tokens: 128 }]);
  assert.deepEqual(body.spec.concurrency, [1]);
  assert.equal(body.spec.warm_runs, 3);
  assert.equal(body.runs_total, 4);
  await runRow(body.id).waitFor({ timeout: 10_000 });
  await rowEnds(body.id, 120_000);
  console.log(`quick check on the tiny model (CPU llama-server): ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
