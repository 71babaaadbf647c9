// The Benchmarks page's Quality part in a real browser against a real daemon on a CPU-only rig,
// with the CPU llama.cpp build (llama-server with llama-perplexity and llama-tokenize beside it)
// and the real Gemma 3 270M. Empty states first; the budget changed in place; a corpus file that
// does not exist refused in the estimate with its fix; then a reference recorded through the form
// (the Gemma file, built-in corpus, 512 tokens per window, 2 windows) with the estimate shown
// before the button, followed until ready; a profile of the same file measured against it from
// the Measure form; the KLD run in the runs list and its detail reading Mean KLD near 0 and the
// same top token near 100 % (the model against itself); a second run compared with the first; the
// frontier listing the profile as having no speed run yet, then (after a speed run) drawing it;
// and the reference deleted with its file's bytes leaving the budget.
// Needs RIGDECK_LLAMA_SERVER (a CPU llama-server with llama-perplexity beside it) and
// RIGDECK_GEMMA_MODEL (tests/fixtures/gemma3_270m.sh).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const gemma = requiredFile("RIGDECK_GEMMA_MODEL", "the real Gemma 3 270M (tests/fixtures/gemma3_270m.sh)");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;
/** The reference recorded through the form, and the KLD run measured against it. */
let refId;
let runId;
/** The second KLD run of the same profile: the frontier shows the latest. */
let secondId;

const api = (method, path, body) => adminRequest(daemon, method, path, body);
const refRow = (id) => page.locator(`[data-testid="quality-reference-row"][data-id="${id}"]`);
const recordForm = () => page.locator('[data-testid="quality-record-form"]');
const measureForm = () => page.locator('[data-testid="quality-measure-form"]');

before(async () => {
  for (const tool of ["llama-perplexity", "llama-tokenize"]) {
    assert.ok(existsSync(join(dirname(llamaServer), tool)), `${tool} beside ${llamaServer}: build the engine again (rigdeck engines build)`);
  }
  daemon = await startDaemon("cpu-only.json");
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: { ...process.env, RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"), RIGDECK_DATA_DIR: daemon.dataDir, RUST_LOG: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const builds = await api("GET", "/api/v1/engines");
  assert.equal(builds.status, 200, JSON.stringify(builds.body));
  const folder = await api("POST", "/api/v1/models/folders", { path: dirname(gemma) });
  assert.ok(folder.status < 300, JSON.stringify(folder.body));
  const created = await api("POST", "/api/v1/profiles", {
    name: "gemma-self",
    engine_build_id: builds.body[0].id,
    model: gemma,
    placement: { context: 2048, threads: 2, parallel: 1 },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  browser = await launchChromium();
  const context = await browser.newContext({ viewport: { width: 1500, height: 1100 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.log(`page error: ${e.message}`));
  await page.goto(daemon.loginUrl);
  await page.locator('nav a[href="#/bench"]').waitFor({ timeout: 15_000 });
});

after(async () => {
  if (daemon) {
    const runs = await api("GET", "/api/v1/bench/runs").catch(() => null);
    for (const r of runs?.body ?? []) if (r.status === "running") await api("POST", `/api/v1/bench/runs/${r.id}/cancel`, {}).catch(() => {});
    const refs = await api("GET", "/api/v1/quality/references").catch(() => null);
    for (const r of refs?.body?.references ?? []) await api("DELETE", `/api/v1/quality/references/${r.id}`).catch(() => {});
  }
  await browser?.close();
  await daemon?.stop();
});

test("the Quality tab starts empty and says what to do next", async () => {
  await page.locator('nav a[href="#/bench"]').click();
  await page.locator('[data-testid="bench-tab-quality"]').click();
  await page.waitForFunction(() => location.hash === "#/bench/quality");
  await page.locator('[data-testid="quality-references-empty"]').waitFor({ timeout: 15_000 });
  assert.match(await page.locator('[data-testid="quality-references-empty"]').textContent(), /record one with the form/);
  assert.match(await page.locator('[data-testid="quality-frontier-empty"]').textContent(), /Once a reference is recorded/);
  assert.match(await page.locator('[data-testid="quality-kld-runs-empty"]').textContent(), /No KLD run yet/);
  assert.match(await measureForm().locator('[data-testid="quality-measure-no-reference"]').textContent(), /record one first/);
  assert.match(await page.locator('[data-testid="quality-budget"]').textContent(), /Reference files/);
  // The form's defaults: long windows, all of them, the built-in corpus with its parts.
  assert.equal(await recordForm().locator('[data-testid="quality-context"]').inputValue(), "8192");
  assert.equal(await recordForm().locator('[data-testid="quality-chunks"]').inputValue(), "");
  assert.match(await recordForm().locator('[data-testid="quality-context-hint"]').textContent(), /never only 512/);
  await recordForm().locator('[data-testid="quality-builtin"]').waitFor({ timeout: 10_000 });
  // The user's own chats as the corpus: none yet, and the page says where to make some.
  await page.waitForFunction((path) => [...document.querySelectorAll('[data-testid="quality-model-file"] option')].some((o) => o.value === path), gemma, { timeout: 30_000 });
  await recordForm().locator('[data-testid="quality-corpus-conversations"]').check();
  await recordForm().locator('[data-testid="quality-no-conversations"]').waitFor({ timeout: 10_000 });
  assert.match(await recordForm().locator('[data-testid="quality-no-conversations"]').textContent(), /chat with a model on the Chat page first/);
  assert.match(await recordForm().locator('[data-testid="quality-estimate"]').textContent(), /Tick at least one conversation/);
  await recordForm().locator('[data-testid="quality-corpus-builtin"]').check();
});

test("the budget is changed in place; a value out of range is refused in the daemon's words", async () => {
  await page.locator('[data-testid="quality-budget-change"]').click();
  await page.locator('[data-testid="quality-budget-input"]').fill("0.5");
  await page.locator('[data-testid="quality-budget-save"]').click();
  const refused = page.locator('[data-testid="quality-budget-error"]');
  await refused.waitFor({ timeout: 10_000 });
  assert.match(await refused.textContent(), /between 1 and 100000 GB/);
  await page.locator('[data-testid="quality-budget-input"]').fill("25");
  await page.locator('[data-testid="quality-budget-save"]').click();
  await page.locator('[data-testid="quality-budget-change"]').waitFor({ timeout: 10_000 });
  assert.match(await page.locator('[data-testid="quality-budget"]').textContent(), /\/ 23\.3 GiB/, "25 GB is 23.3 GiB");
  assert.equal((await api("GET", "/api/v1/settings")).body.quality_reference_budget_gb, 25);
});

test("a corpus file that does not exist is refused in the estimate, with its fix, and Record stays off", async () => {
  await page.waitForFunction((path) => [...document.querySelectorAll('[data-testid="quality-model-file"] option')].some((o) => o.value === path), gemma, { timeout: 30_000 });
  await recordForm().locator('[data-testid="quality-model-file"]').selectOption(gemma);
  await recordForm().locator('[data-testid="quality-corpus-file"]').check();
  await recordForm().locator('[data-testid="quality-corpus-path"]').fill("/nonexistent/corpus.txt");
  const error = recordForm().locator('[data-testid="quality-estimate-error"]');
  await error.waitFor({ timeout: 30_000 });
  assert.match(await error.textContent(), /nonexistent\/corpus\.txt/);
  assert.equal(await recordForm().locator('[data-testid="quality-record"]').isDisabled(), true);
});

test("a reference is recorded through the form, with the estimate first, and followed until ready", async () => {
  await recordForm().locator('[data-testid="quality-corpus-builtin"]').check();
  await recordForm().locator('[data-testid="quality-context"]').fill("512");
  await recordForm().locator('[data-testid="quality-chunks"]').fill("2");
  assert.match(await recordForm().locator('[data-testid="quality-context-hint"]').getAttribute("class"), /warn-text/, "512 is warned about");
  const estimate = recordForm().locator('[data-testid="quality-estimate-text"]');
  await page.waitForFunction(() => /in 2 windows/.test(document.querySelector('[data-testid="quality-estimate-text"]')?.textContent ?? ""), null, { timeout: 60_000 });
  const said = await estimate.textContent();
  assert.match(said, /tokens scored in 2 windows \(of [\d\u202f]+ in the corpus\); [\d.]+ MiB on disk, of [\d.]+ GiB left in the [\d.]+ GiB budget/);
  const record = recordForm().locator('[data-testid="quality-record"]');
  await page.waitForFunction(() => !document.querySelector('[data-testid="quality-record"]')?.disabled, null, { timeout: 30_000 });

  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/quality/references"));
  await record.click();
  const answer = await sent;
  assert.equal(answer.status(), 202, await answer.text());
  const body = JSON.parse(await answer.text());
  refId = body.id;
  assert.equal(body.state, "recording");
  assert.deepEqual(body.corpus, { kind: "builtin" });
  assert.equal(body.context, 512);
  assert.equal(body.chunks, 2);
  await refRow(refId).waitFor({ timeout: 10_000 });
  await page.waitForFunction((id) => document.querySelector(`[data-testid="quality-reference-row"][data-id="${id}"]`)?.getAttribute("data-state") !== "recording", refId, { timeout: 300_000 });
  const state = await refRow(refId).getAttribute("data-state");
  if (state !== "ready") throw new Error(`reference ${refId} ended ${state}: ${await refRow(refId).locator('[data-testid="quality-reference-error"]').textContent().catch(() => "")}`);
  const cells = await refRow(refId).locator("td").evaluateAll((tds) => tds.map((td) => td.textContent.trim()));
  assert.match(cells[0], /gemma-3-270m-q4_k_m\.gguf/);
  assert.match(cells[1], /^built-in/);
  assert.equal(cells[2], "512 × 2");
  assert.match(cells[4], /^[\d.]+ MiB$/, "its size on disk");
  const listing = await api("GET", "/api/v1/quality/references");
  assert.ok(listing.body.used_bytes > 0);
  assert.match(await page.locator('[data-testid="quality-budget"]').textContent(), /MiB/);
});

test("the profile of the same file, measured against it from the page, reads Mean KLD near 0 and the same top token near 100 %", async () => {
  await measureForm().locator('[data-testid="quality-measure-reference"]').waitFor({ timeout: 10_000 });
  assert.equal(await measureForm().locator('[data-testid="quality-measure-reference"]').inputValue(), refId);
  const box = measureForm().locator('[data-testid="quality-measure-profile"][data-name="gemma-self"]');
  await box.waitFor({ timeout: 15_000 });
  assert.match(await box.locator("xpath=..").textContent(), /the reference's file/);
  await box.check();
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/runs"));
  await measureForm().locator('[data-testid="quality-measure-start"]').click();
  const answer = await sent;
  assert.equal(answer.status(), 201, await answer.text());
  const run = JSON.parse(await answer.text());
  runId = run.id;
  assert.equal(run.kind, "kld");
  assert.deepEqual(run.target, { kind: "profile", name: "gemma-self" });

  const row = page.locator(`[data-testid="quality-kld-runs"] [data-testid="bench-run-row"][data-id="${runId}"]`);
  await row.waitFor({ timeout: 10_000 });
  await page.waitForFunction((id) => {
    const s = document.querySelector(`[data-testid="bench-run-row"][data-id="${id}"]`)?.getAttribute("data-status");
    return s && s !== "running";
  }, runId, { timeout: 300_000 });
  const status = await row.getAttribute("data-status");
  if (status !== "done") throw new Error(`KLD run ${runId} ended ${status}: ${(await api("GET", `/api/v1/bench/runs/${runId}`)).body?.error}`);
  assert.match(await row.locator('[data-testid="bench-run-kld"]').textContent(), /^Mean KLD -?[\d.]+ ± [\d.]+, same top [\d.]+ %$/);

  await row.locator("td.name a").click();
  await page.waitForFunction((id) => location.hash === `#/bench/${id}`, runId);
  const detail = page.locator(`[data-testid="bench-detail"][data-id="${runId}"]`);
  await detail.locator('[data-testid="kld-summary"]').waitFor({ timeout: 15_000 });
  const value = async (id) => (await detail.locator(`[data-testid="${id}"] .value`).textContent()).trim();
  const mean = await value("kld-mean");
  const [meanValue] = mean.split(" ± ").map(Number);
  assert.ok(Math.abs(meanValue) < 0.01, `Mean KLD of the model against itself near 0: ${mean}`);
  const sameTop = await value("kld-same-top");
  assert.ok(Number(sameTop.split(" ")[0]) >= 99, `same top token near 100 %: ${sameTop}`);
  assert.match(await value("kld-ppl-ratio"), /^1\.0\d{3} ± /);
  assert.match(await value("kld-scored"), /^\d/);
  assert.match(await detail.locator('[data-testid="kld-summary"]').textContent(), /top token unchanged on/);
  // What the page shows is what the daemon stored.
  const stored = (await api("GET", `/api/v1/bench/runs/${runId}`)).body.kld;
  assert.equal(stored.reference, refId);
  const decimals = mean.split(" ± ")[0].split(".")[1]?.length ?? 0;
  assert.equal(meanValue, Number(stored.mean.toFixed(decimals)), `the page's ${mean} is the stored ${stored.mean}`);
  // No CSV (a KLD run has no rows of runs); its JSON and Markdown, and Run again leads to Quality.
  assert.equal(await detail.locator('[data-testid="bench-export-csv"]').count(), 0);
  assert.equal(await detail.locator('[data-testid="bench-export-json"]').count(), 1);
  const md = await api("GET", `/api/v1/bench/runs/${runId}/export?format=md`);
  assert.equal(md.status, 200);
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, "quality-kld-run.png"), fullPage: false });
  await detail.locator('[data-testid="bench-run-again"]').click();
  await page.waitForFunction(() => location.hash === "#/bench/quality");
  assert.equal(await measureForm().locator('[data-testid="quality-measure-reference"]').inputValue(), refId);
});

test("a second KLD run of the profile, picked beside the first, is compared figure by figure and not distinguishable", async () => {
  await measureForm().locator('[data-testid="quality-measure-profile"][data-name="gemma-self"]').check();
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/runs"));
  await measureForm().locator('[data-testid="quality-measure-start"]').click();
  const second = JSON.parse(await (await sent).text()).id;
  secondId = second;
  await page.waitForFunction((id) => {
    const s = document.querySelector(`[data-testid="bench-run-row"][data-id="${id}"]`)?.getAttribute("data-status");
    return s && s !== "running";
  }, second, { timeout: 300_000 });
  await page.locator('[data-testid="bench-tab-runs"]').click();
  for (const id of [runId, second]) await page.locator(`[data-testid="bench-run-row"][data-id="${id}"] [data-testid="bench-pick"]`).check();
  const compare = page.locator('[data-testid="kld-compare"]');
  await compare.waitFor({ timeout: 10_000 });
  const keys = await compare.locator('[data-testid="kld-compare-row"]').evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-key")));
  assert.deepEqual(keys, ["mean", "p99", "max", "same_top", "rms_dp", "ppl_ratio"]);
  assert.match(await compare.locator('[data-testid="kld-compare-row"][data-key="mean"]').textContent(), /overlap: not distinguishable/);
  assert.match(await compare.locator('[data-testid="kld-compare-verdict"]').textContent(), /^Not distinguishable on Mean KLD/);
  await page.locator('[data-testid="bench-compare"] button', { hasText: "Clear" }).click();
  await page.locator('[data-testid="bench-tab-quality"]').click();
});

test("the frontier lists the measured profile as having no speed run yet", async () => {
  await page.locator('[data-testid="bench-tab-quality"]').click();
  const unplaced = page.locator('[data-testid="quality-frontier-unplaced"]');
  await unplaced.waitFor({ timeout: 15_000 });
  assert.match(await unplaced.textContent(), /no speed run yet: gemma-self/);
  const row = page.locator('[data-testid="quality-frontier-row"][data-profile="gemma-self"]');
  assert.match(await row.textContent(), /no speed run yet/);
  assert.match(await row.textContent(), new RegExp(`KLD #${secondId}`), "the latest KLD run");
  assert.equal(await page.locator('[data-testid="quality-frontier-chart"]').count(), 0, "nothing to place on the chart");
});

test("a speed run of the profile places it on the frontier chart, labelled, on the front", async () => {
  const started = await api("POST", "/api/v1/bench/runs", {
    name: "gemma-self speed",
    target: { kind: "profile", name: "gemma-self" },
    spec: { shapes: [{ prompt_tokens: 64, output_tokens: 16 }], warm_runs: 1 },
  });
  assert.equal(started.status, 201, JSON.stringify(started.body));
  const chart = page.locator('[data-testid="quality-frontier-chart"]');
  await chart.waitFor({ timeout: 300_000 });
  const speed = (await api("GET", `/api/v1/bench/runs/${started.body.id}`)).body;
  assert.equal(speed.status, "done", speed.error ?? "");
  assert.equal(await chart.getAttribute("data-points"), "1");
  await page.waitForFunction(() => {
    const c = document.querySelector('[data-testid="quality-frontier-chart"] canvas');
    if (!c || c.width === 0) return false;
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true;
    return false;
  }, null, { timeout: 10_000 });
  const point = chart.locator('[data-testid="quality-frontier-point"][data-profile="gemma-self"]');
  assert.match(await point.textContent(), /gemma-self\s*-?[\d.]+ · [\d.]+ tok\/s/);
  const row = page.locator('[data-testid="quality-frontier-row"][data-profile="gemma-self"]');
  assert.match(await row.textContent(), /frontier/);
  assert.match(await row.textContent(), new RegExp(`speed #${started.body.id}`));
  assert.equal(await page.locator('[data-testid="quality-frontier-unplaced"]').count(), 0);
  await page.screenshot({ path: join(artifacts, "quality-tab.png"), fullPage: true });
});

test("the reference is deleted after a confirmation, its bytes leaving the budget", async () => {
  const before = (await api("GET", "/api/v1/quality/references")).body;
  assert.ok(before.used_bytes > 0);
  await refRow(refId).locator('[data-testid="quality-delete"]').click();
  const confirm = refRow(refId).locator('[data-testid="quality-delete-confirm"]');
  assert.match(await confirm.textContent(), /^Delete [\d.]+ MiB$/);
  await confirm.click();
  await page.locator('[data-testid="quality-references-empty"]').waitFor({ timeout: 15_000 });
  const after = (await api("GET", "/api/v1/quality/references")).body;
  assert.deepEqual(after.references, []);
  assert.equal(after.used_bytes, 0);
  assert.match(await page.locator('[data-testid="quality-budget"]').textContent(), /^Reference files\s*0 B/);
});
