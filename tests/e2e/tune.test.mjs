// The Tuning half of the Benchmarks page in a real browser against a real daemon playing the 2× RTX
// 5060 Ti rig: a CPU llama-server registered with the CLI and a stopped launch profile for a tiny
// GGUF (context 2048, one thread). On the page: a knob the daemon does not know refused in its
// words; a grid tuning of ubatch 64 and 128 filled in and started (32:16, 3 warm runs, the
// completions API), its progress while it runs, the page reloaded mid-run still showing it from
// the daemon; once it ended, three trials in order, each with its verdict badge and the reason
// beside it and a link to the benchmark run that measured it; the same after another reload; the
// best values saved as a new profile when a trial beat the baseline beyond the noise (else the
// page says there is nothing to save); a trial's link opening its run under Runs; and a tuning
// held to a quality floor from the form (a reference recorded on the tiny model, "no worse than
// as saved"): the trials table's KLD column, the threads trials reusing the first trial's KLD.
// Needs RIGDECK_LLAMA_SERVER (a built llama-server, llama-perplexity beside it) and
// RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;
/** The tuning started from the form, as it ended. */
let tuneId;
let ended;

const api = (method, path, body) => adminRequest(daemon, method, path, body);

const form = () => page.locator('[data-testid="tune-form"]');
const detail = () => page.locator(`[data-testid="tune-detail"][data-id="${tuneId}"]`);
const trialRows = () => detail().locator('[data-testid="tune-trial-row"]');

/** Each trial row's number, values, outcome, verdict badge and reason, and run link. */
async function trialTexts() {
  return trialRows().evaluateAll((rows) =>
    rows.map((r) => ({
      values: r.querySelector('[data-testid="tune-trial-values"]')?.textContent.trim(),
      outcome: r.getAttribute("data-outcome"),
      verdict: r.querySelector('[data-testid="tune-verdict"]')?.textContent.trim() ?? null,
      reason: r.querySelector('[data-testid="tune-reason"]')?.textContent.trim() ?? null,
      objective: r.querySelectorAll("td")[3]?.querySelector("strong")?.textContent.trim(),
      run: r.querySelector('[data-testid="tune-run-link"]')?.getAttribute("href") ?? null,
    })),
  );
}

/** Fills the form's knob row, shape, warm runs and API for the tiny model. */
async function fillForm({ name, knob, flag, values, strategy }) {
  const f = form();
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="tune-profile"] option')].some((o) => o.value === "tiny"), null, { timeout: 15_000 });
  await f.locator('[data-testid="tune-profile"]').selectOption("tiny");
  await f.locator('[data-testid="tune-name"]').fill(name);
  const row = f.locator('[data-testid="tune-knob-row"]').first();
  await row.locator('[data-testid="tune-knob-name"]').selectOption(knob);
  if (flag) await row.locator('[data-testid="tune-knob-flag"]').fill(flag);
  await row.locator('[data-testid="tune-knob-values"]').fill(values);
  await f.locator(`[data-testid="tune-strategy-${strategy}"]`).check();
  await f.locator('[data-testid="tune-shape"]').fill("32:16");
  await f.locator('[data-testid="tune-warm-runs"]').fill("3");
  await f.locator('[data-testid="tune-api"]').selectOption("completions");
}

/** Records, at every change of the page, each tuning row's progress text ("trial 2 of ≤ 3"). */
async function recordProgress() {
  await page.evaluate(() => {
    window.__progress = [];
    const observer = new MutationObserver(() => {
      for (const el of document.querySelectorAll('[data-testid="tune-row"] [data-testid="tune-progress"]')) {
        const text = el.textContent.trim();
        if (!window.__progress.includes(text)) window.__progress.push(text);
      }
    });
    observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
    window.__stopProgress = () => {
      observer.disconnect();
      return window.__progress;
    };
  });
}

/** Starts the form's tuning; the daemon's answer. */
async function submit() {
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/bench/tunes"));
  await form().locator('[data-testid="tune-start"]').click();
  const answer = await sent;
  return { status: answer.status(), body: JSON.parse(await answer.text()) };
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
    placement: { context: 2048, threads: 1 },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  browser = await launchChromium();
  const context = await browser.newContext({ viewport: { width: 1500, height: 1000 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.log(`page error: ${e.message}`));
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  if (daemon) {
    const refs = await api("GET", "/api/v1/quality/references").catch(() => null);
    for (const r of refs?.body?.references ?? []) await api("DELETE", `/api/v1/quality/references/${r.id}`).catch(() => {});
    const tunes = await api("GET", "/api/v1/bench/tunes").catch(() => null);
    for (const t of tunes?.body ?? []) if (t.status === "running") await api("POST", `/api/v1/bench/tunes/${t.id}/cancel`, {}).catch(() => {});
    const list = await api("GET", "/api/v1/instances").catch(() => null);
    for (const v of list?.body ?? []) {
      if (["starting", "loading", "ready"].includes(v.phase)) await api("POST", `/api/v1/instances/${v.name}/stop`).catch(() => {});
    }
  }
  await browser?.close();
  await daemon?.stop();
});

test("the Tuning half opens from the Benchmarks page; a knob the daemon does not know is refused in its words", async () => {
  await page.locator('nav a[href="#/bench"]').click();
  await page.locator('[data-testid="bench-page"]').waitFor({ timeout: 15_000 });
  await page.locator('[data-testid="bench-tab-tune"]').click();
  await page.waitForFunction(() => location.hash === "#/bench/tune", null, { timeout: 10_000 });
  await page.locator('[data-testid="tunes-empty"]').waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('[data-testid="bench-tab-tune"]').getAttribute("aria-current"), "page");
  assert.equal(await page.locator('[data-testid="bench-form"]').count(), 0, "the benchmark form gives way to the tuning form");

  // Plainly missing values are caught before Start.
  await fillForm({ name: "refused", knob: "other", flag: "speed", values: "", strategy: "walk" });
  assert.match(await form().locator('[data-testid="tune-draft-problem"]').textContent(), /speed: give the values to try/);
  assert.equal(await form().locator('[data-testid="tune-start"]').isDisabled(), true);
  await form().locator('[data-testid="tune-knob-values"]').fill("1, 2");
  assert.equal((await form().locator('[data-testid="tune-plan"]').textContent()).trim(), "up to 3 trials: the profile as saved + 2 values of speed");
  const refused = await submit();
  assert.equal(refused.status, 400, JSON.stringify(refused.body));
  const line = form().locator('[data-testid="tune-start-error"]');
  await line.waitFor({ timeout: 10_000 });
  assert.equal(await line.getAttribute("data-code"), "invalid_tuning");
  assert.match(await line.textContent(), /'speed' is not a knob: use one of threads/);
  assert.equal(await page.locator('[data-testid="tunes-empty"]').count(), 1, "nothing was started");
});

test("a grid over ubatch is started from the form; a reload mid-run shows it from the daemon; each trial has its verdict and reason", async () => {
  await fillForm({ name: "tiny ubatch", knob: "ubatch", values: "64, 128", strategy: "grid" });
  assert.equal((await form().locator('[data-testid="tune-plan"]').textContent()).trim(), "up to 3 trials: the profile as saved + 2 combinations");
  await recordProgress();
  const started = await submit();
  assert.equal(started.status, 201, JSON.stringify(started.body));
  tuneId = started.body.id;
  assert.equal(started.body.profile, "tiny");
  assert.equal(started.body.trials_planned, 3);
  assert.equal(started.body.spec.strategy, "grid");
  assert.deepEqual(started.body.spec.knobs.map((k) => [k.name, k.values]), [["ubatch", ["64", "128"]]]);
  assert.deepEqual(started.body.spec.bench.shapes, [{ prompt_tokens: 32, output_tokens: 16 }]);
  assert.equal(started.body.spec.bench.warm_runs, 3);
  assert.equal(started.body.spec.bench.api, "completions");
  assert.equal(await form().locator('[data-testid="tune-start-error"]').count(), 0, "the earlier refusal is gone");

  // The page opens the tuning, and its progress shows from the daemon's events.
  await page.waitForFunction((id) => location.hash === `#/bench/tune/${id}`, tuneId, { timeout: 10_000 });
  await detail().waitFor({ timeout: 10_000 });
  const row = page.locator(`[data-testid="tune-row"][data-id="${tuneId}"]`);
  await row.waitFor({ timeout: 10_000 });
  const seen = await page.evaluate(() => window.__stopProgress());
  assert.ok(seen.some((s) => /^trial [1-3] of ≤ 3$/.test(s)), `its progress was shown as the trial of those planned: ${JSON.stringify(seen)}`);

  // Reloaded while it runs (once its first trial is in): the tuning is still there, read from the API.
  await page.waitForFunction((id) => document.querySelectorAll(`[data-testid="tune-detail"][data-id="${id}"] [data-testid="tune-trial-row"]`).length >= 1, tuneId, { timeout: 60_000 });
  const statusBefore = await detail().getAttribute("data-status");
  await page.reload();
  await page.locator('[data-testid="bench-page"]').waitFor({ timeout: 15_000 });
  await detail().waitFor({ timeout: 15_000 });
  assert.ok(["running", "done"].includes(await detail().getAttribute("data-status")), `shown after the reload (was ${statusBefore})`);
  assert.ok((await trialRows().count()) >= 1, "its trials so far are shown after the reload");
  assert.equal(await page.locator('[data-testid="bench-tab-tune"]').getAttribute("aria-current"), "page");

  await page.waitForFunction((id) => {
    const s = document.querySelector(`[data-testid="tune-detail"][data-id="${id}"]`)?.getAttribute("data-status");
    return s && s !== "running";
  }, tuneId, { timeout: 240_000 });
  ended = (await api("GET", `/api/v1/bench/tunes/${tuneId}`)).body;
  assert.equal(ended.status, "done", `the tuning ended ${ended.status}: ${ended.error}\n${JSON.stringify(ended.trials, null, 1).slice(0, 3000)}`);
  assert.equal(await row.getAttribute("data-status"), "done");
  assert.equal((await row.locator('[data-testid="tune-progress"]').textContent()).trim(), "3 trials");

  await page.waitForFunction((id) => {
    const rows = document.querySelectorAll(`[data-testid="tune-detail"][data-id="${id}"] [data-testid="tune-trial-row"]`);
    return rows.length === 3 && [...rows].every((r) => r.querySelector('[data-testid="tune-verdict"]'));
  }, tuneId, { timeout: 15_000 });
  const trials = await trialTexts();
  assert.deepEqual(trials.map((t) => t.values), ["as saved", "ubatch=64", "ubatch=128"]);
  assert.equal(trials[0].verdict, "baseline");
  for (const [i, t] of trials.entries()) {
    assert.equal(t.outcome, "measured", `trial ${i + 1} measured: ${JSON.stringify(ended.trials[i])}`);
    assert.ok(["baseline", "better", "within noise", "worse"].includes(t.verdict), `trial ${i + 1} has a verdict badge: ${t.verdict}`);
    assert.match(t.reason, /median \d+(\.\d+)? tok\/s/, `trial ${i + 1} has its reason beside the verdict: ${t.reason}`);
    assert.equal(t.reason, ended.trials[i].decision.reason, "the reason is the daemon's, word for word");
    assert.match(t.objective, /^\d+(\.\d+)? ± \d+(\.\d+)? tok\/s$/, `trial ${i + 1}'s median ± stdev: ${t.objective}`);
    assert.equal(t.run, `#/bench/${ended.trials[i].run_id}`, `trial ${i + 1} links to its benchmark run`);
  }
  // The command line of each trial is there to open.
  const command = trialRows().nth(1).locator("details");
  await command.locator("summary").click();
  assert.match(await command.locator('[data-testid="tune-command"]').textContent(), /-ub 64/);
  // The objective per trial is drawn.
  await detail().locator('[data-testid="tune-chart"] canvas').first().waitFor({ timeout: 10_000 });
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, "tune.png"), fullPage: true });
});

test("after a reload the ended tuning reads the same; its best is saved as a new profile, or it says there is none", async () => {
  const before = await trialTexts();
  await page.reload();
  await detail().waitFor({ timeout: 15_000 });
  await page.waitForFunction((id) => document.querySelectorAll(`[data-testid="tune-detail"][data-id="${id}"] [data-testid="tune-trial-row"]`).length === 3, tuneId, { timeout: 10_000 });
  assert.deepEqual(await trialTexts(), before);

  console.log(ended.best ? `best: ${JSON.stringify(ended.best.values)}, ${ended.best.gain_percent.toFixed(1)} %` : "no trial beat the profile as saved beyond the noise");
  if (ended.best) {
    const best = detail().locator('[data-testid="tune-best"]');
    assert.match(await best.locator('[data-testid="tune-best-values"]').textContent(), /^ubatch=(64|128)$/);
    assert.match(await best.locator('[data-testid="tune-best-gain"]').textContent(), /^\+\d+\.\d %$/);
    assert.equal(await best.locator('[data-testid="tune-save-name"]').inputValue(), "tiny-tuned");
    const saved = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith(`/api/v1/bench/tunes/${tuneId}/save`));
    await best.locator('[data-testid="tune-save"]').click();
    const answer = await saved;
    assert.equal(answer.status(), 201, await answer.text());
    await best.locator('[data-testid="tune-saved"]').waitFor({ timeout: 10_000 });
    assert.match(await best.locator('[data-testid="tune-saved"]').textContent(), /tiny-tuned/);
    const profile = await api("GET", "/api/v1/profiles/tiny-tuned");
    assert.equal(profile.status, 200, JSON.stringify(profile.body));
    assert.equal(String(profile.body.profile.placement.ubatch), ended.best.values.ubatch);
    // The new profile can be picked for the next tuning.
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="tune-profile"] option')].some((o) => o.value === "tiny-tuned"), null, { timeout: 15_000 });
    assert.match(await page.locator(`[data-testid="tune-row"][data-id="${tuneId}"] [data-testid="tune-gain"]`).textContent(), /saved as tiny-tuned/);
  } else {
    await detail().locator('[data-testid="tune-no-best"]').waitFor({ timeout: 5_000 });
    assert.equal(await detail().locator('[data-testid="tune-save"]').count(), 0, "nothing to save");
    const refused = await api("POST", `/api/v1/bench/tunes/${tuneId}/save`, { name: "tiny-tuned" });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
  }
});

test("a trial's link opens its benchmark run under Runs; Delete removes the tuning once asked twice", async () => {
  const runId = ended.trials[1].run_id;
  await trialRows().nth(1).locator('[data-testid="tune-run-link"]').click();
  await page.waitForFunction((id) => location.hash === `#/bench/${id}`, runId, { timeout: 10_000 });
  await page.locator(`[data-testid="bench-detail"][data-id="${runId}"]`).waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('[data-testid="bench-tab-runs"]').getAttribute("aria-current"), "page");
  assert.match(await page.locator(`[data-testid="bench-run-row"][data-id="${runId}"]`).textContent(), /tiny trial 2: ubatch=64/);

  await page.locator('[data-testid="bench-tab-tune"]').click();
  await page.locator(`[data-testid="tune-row"][data-id="${tuneId}"] a`).click();
  await detail().waitFor({ timeout: 10_000 });
  await detail().locator('[data-testid="tune-delete"]').click();
  await detail().locator('[data-testid="tune-delete-confirm"]').click();
  await page.waitForFunction(() => location.hash === "#/bench/tune", null, { timeout: 10_000 });
  await page.locator('[data-testid="tunes-empty"]').waitFor({ timeout: 10_000 });
  assert.equal((await api("GET", `/api/v1/bench/tunes/${tuneId}`)).status, 404);
  // The trials' runs stay.
  assert.equal((await api("GET", `/api/v1/bench/runs/${runId}`)).status, 200);
});

test("a tuning that finds a win: its best values are saved from the page as a new profile", async () => {
  // A profile that prefills 8 tokens at a time: 512 at once prefills far faster, beyond any noise.
  const builds = await api("GET", "/api/v1/engines");
  const created = await api("POST", "/api/v1/profiles", {
    name: "slow",
    engine_build_id: builds.body[0].id,
    model: tinyModel,
    placement: { context: 2048, threads: 1, ubatch: 8 },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const started = await api("POST", "/api/v1/bench/tunes", {
    name: "slow prefill",
    profile: "slow",
    spec: {
      knobs: [{ name: "ubatch", values: [512] }],
      objective: "prefill_tps",
      bench: { shapes: [{ prompt_tokens: 512, output_tokens: 4 }], warm_runs: 3, api: "completions" },
    },
  });
  assert.equal(started.status, 201, JSON.stringify(started.body));
  tuneId = started.body.id;
  // Started elsewhere: the page learns of it from the daemon's events.
  await page.locator(`[data-testid="tune-row"][data-id="${tuneId}"]`).waitFor({ timeout: 10_000 });
  await page.locator(`[data-testid="tune-row"][data-id="${tuneId}"] a`).click();
  await detail().waitFor({ timeout: 10_000 });
  await page.waitForFunction((id) => document.querySelector(`[data-testid="tune-detail"][data-id="${id}"]`)?.getAttribute("data-status") !== "running", tuneId, { timeout: 240_000 });
  const view = (await api("GET", `/api/v1/bench/tunes/${tuneId}`)).body;
  assert.equal(view.status, "done", `${view.error}\n${JSON.stringify(view.trials, null, 1).slice(0, 3000)}`);
  assert.ok(view.best, `ubatch 512 beat ubatch 8 at prefill: ${JSON.stringify(view.trials.map((t) => t.decision))}`);

  assert.deepEqual((await trialTexts()).map((t) => [t.values, t.verdict]), [["as saved", "baseline"], ["ubatch=512", "better"]]);
  assert.match((await trialTexts())[1].objective, / tok\/s$/);
  const best = detail().locator('[data-testid="tune-best"]');
  assert.equal((await best.locator('[data-testid="tune-best-values"]').textContent()).trim(), "ubatch=512");
  assert.match(await best.locator('[data-testid="tune-best-gain"]').textContent(), /^\+\d+\.\d %$/);
  assert.equal(await best.locator('[data-testid="tune-save-name"]').inputValue(), "slow-tuned");
  const saved = page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith(`/api/v1/bench/tunes/${tuneId}/save`));
  await best.locator('[data-testid="tune-save"]').click();
  const answer = await saved;
  assert.equal(answer.status(), 201, await answer.text());
  await best.locator('[data-testid="tune-saved"]').waitFor({ timeout: 10_000 });
  assert.match(await best.locator('[data-testid="tune-saved"]').textContent(), /slow-tuned/);
  assert.equal(await best.locator('[data-testid="tune-save"]').count(), 0, "saved once");
  const profile = await api("GET", "/api/v1/profiles/slow-tuned");
  assert.equal(profile.status, 200, JSON.stringify(profile.body));
  assert.equal(profile.body.profile.placement.ubatch, 512);
  // The list says so, and the new profile can be picked for the next tuning.
  assert.match(await page.locator(`[data-testid="tune-row"][data-id="${tuneId}"] [data-testid="tune-gain"]`).textContent(), /saved as slow-tuned/);
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="tune-profile"] option')].some((o) => o.value === "slow-tuned"), null, { timeout: 15_000 });
  // Saving the same name again is refused in the daemon's words (a profile of that name exists).
  const again = await api("POST", `/api/v1/bench/tunes/${tuneId}/save`, { name: "slow-tuned" });
  assert.notEqual(again.status, 201, JSON.stringify(again.body));
  await page.screenshot({ path: join(artifacts, "tune-saved.png"), fullPage: true });
});

test("a tuning held to a quality floor: the KLD column, threads trials reusing the first trial's figure, the floor in the spec", async () => {
  const recording = await api("POST", "/api/v1/quality/references", { model: { kind: "file", path: tinyModel }, corpus: { kind: "builtin" }, context: 512, chunks: 2 });
  assert.equal(recording.status, 202, JSON.stringify(recording.body));
  const reference = recording.body.id;
  const deadline = Date.now() + 240_000;
  let recorded;
  do {
    await new Promise((r) => setTimeout(r, 300));
    recorded = (await api("GET", "/api/v1/quality/references")).body.references.find((r) => r.id === reference);
  } while (recorded?.state === "recording" && Date.now() < deadline);
  assert.equal(recorded?.state, "ready", JSON.stringify(recorded));

  // A grid runs every value whatever the figures say (a walk stops at the first trial that
  // comes out worse, and threads=1 against the same profile can, by noise, on a busy machine).
  await fillForm({ name: "tiny floor", knob: "threads", values: "1, 2", strategy: "grid" });
  // The ready reference reached the form through the daemon's events.
  await page.waitForFunction((id) => [...document.querySelectorAll('[data-testid="tune-floor-reference"] option')].some((o) => o.value === id), reference, { timeout: 15_000 });
  await form().locator('[data-testid="tune-floor-reference"]').selectOption(reference);
  await form().locator('[data-testid="tune-floor-mode-base"]').check();
  assert.equal(await form().locator('[data-testid="tune-floor-max"]').count(), 0, "no bound to type for 'no worse than as saved'");
  const started = await submit();
  assert.equal(started.status, 201, JSON.stringify(started.body));
  tuneId = started.body.id;
  assert.deepEqual(started.body.spec.quality_floor, { reference, max_mean_kld: null });

  await detail().waitFor({ timeout: 10_000 });
  await page.waitForFunction((id) => document.querySelector(`[data-testid="tune-detail"][data-id="${id}"]`)?.getAttribute("data-status") !== "running", tuneId, { timeout: 300_000 });
  const view = (await api("GET", `/api/v1/bench/tunes/${tuneId}`)).body;
  const kldRuns = (await api("GET", "/api/v1/bench/runs")).body.filter?.((r) => r.kind === "kld") ?? [];
  assert.equal(view.status, "done", `${view.error}\n${JSON.stringify(kldRuns, null, 1).slice(0, 3000)}`);
  assert.match(await detail().locator('[data-testid="tune-spec"]').textContent(), /quality floor: no worse than the profile as saved against reference /);

  const cells = detail().locator('[data-testid="tune-trial-kld"]');
  await page.waitForFunction((id) => document.querySelectorAll(`[data-testid="tune-detail"][data-id="${id}"] [data-testid="tune-trial-kld"]`).length === 3, tuneId, { timeout: 10_000 });
  const texts = await cells.evaluateAll((tds) => tds.map((td) => ({ text: td.textContent.replace(/\s+/g, " ").trim(), within: td.getAttribute("data-within") })));
  for (const [i, cell] of texts.entries()) {
    assert.equal(cell.within, "true", `trial ${i + 1} is under the floor: ${cell.text}`);
    assert.match(cell.text, /^-?\d+(\.\d+)? ± \d+(\.\d+)? top token \d+\.\d %/, `trial ${i + 1}'s KLD: ${cell.text}`);
    if (i > 0) assert.match(cell.text, /KLD of trial 1: same numerics/, `trial ${i + 1} reuses the first's KLD`);
    assert.match(cell.text, new RegExp(`KLD run #${view.trials[0].kld.run_id}`));
  }
  const reasons = await detail().locator('[data-testid="tune-reason"]').allTextContents();
  assert.ok(reasons.every((r) => /quality: mean KLD .* ≤ bound/.test(r)), JSON.stringify(reasons));
  if (view.best) {
    assert.match(await detail().locator('[data-testid="tune-best-floor"]').textContent(), /^Respects the quality floor: mean KLD .* ≤ bound /);
  } else {
    assert.match(await detail().locator('[data-testid="tune-no-best"]').textContent(), /while staying under the quality floor/);
  }
  await page.screenshot({ path: join(artifacts, "tune-floor.png"), fullPage: true });
});
