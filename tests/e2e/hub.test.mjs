// The model hub in a real browser: a real daemon (the 4× RTX 3090 rig) against the fake hub
// (crates/hub/examples/fake_hub) serving one repository whose Q4_K_M is the tiny real GGUF, beside
// a quantization that is not a GGUF, an incomplete split upload, a projector and a hostile card.
// Search, the model page with its fit, a download with live progress (the hub is throttled),
// pause and resume, the model in the library, and the placement editor on it; then the
// downloaded model verified against the hub and deleted, and the download folder setting.
// Recommended for this rig: a catalog (RIGDECK_STARTER_CATALOG) of the tiny model, the real
// Gemma 3 270M (a second repository), a repository whose file is not a GGUF and one the hub does
// not have, planned on the live rig and ranked; Run on every card, quantization and model.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { startFakeHub } from "./fake_hub.mjs";
import { adminRequest, fixtures, startDaemon, launchChromium } from "./daemon.mjs";

const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";
const REPO = "rigdeck-test/Tiny-Llama-GGUF";
const OTHER = "someone-else/Big-Model-GGUF";
const GEMMA = "unsloth/gemma-3-270m-it-GGUF";
/** In the catalog, not on the stand-in hub. */
const ABSENT = "unsloth/Qwen3-8B-GGUF";
/** The fake hub's commit for its first repository. */
const COMMIT = "01".repeat(20);
/** Per request; the downloader opens four. Slow enough to watch, fast enough for a test. */
const THROTTLE_BPS = 5_000_000;
const TOKEN = "hf_" + "e2eTestTokenNeverShown".padEnd(34, "x");

let dir;
let hub;
let daemon;
let browser;
let page;
let modelPath;
let hubCache;
/** The rig the NVML double plays: a copy of the 4× RTX 3090 fixture that a test may edit. */
let rigPath;

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the browser tests through \`make test-e2e\``);
  return value;
}

/** Waits until `fn` (run in the page) is true; `what` names it in the failure. */
async function until(what, fn, arg, timeout = 15_000) {
  try {
    await page.waitForFunction(fn, arg, { timeout });
  } catch (e) {
    throw new Error(`timed out waiting for ${what}: ${e.message.split("\n")[0]}`);
  }
}

/** Rewrites the rig the double plays (write, then rename: it never reads half a file). */
function editRig(edit) {
  const rig = JSON.parse(readFileSync(rigPath, "utf8"));
  edit(rig);
  writeFileSync(`${rigPath}.tmp`, JSON.stringify(rig));
  renameSync(`${rigPath}.tmp`, rigPath);
}

/** The llama-server flags after `-m MODEL` (the fit names the file on the hub, the plan on disk). */
function flagsPastModel(line) {
  const words = line.trim().split(/\s+/);
  const at = words.indexOf("-m");
  assert.ok(at >= 0, `-m in ${line}`);
  return words.filter((_, i) => i !== at + 1).slice(1);
}

const row = (label) => page.locator(`[data-testid="quant-row"][data-label="${label}"]`);
const download = () => page.locator(`[data-testid="download"][data-repo="${REPO}"][data-label="Q4_K_M"]`);
const cached = () => page.locator(`[data-testid="cached-model"][data-repo="${REPO}"]`);

async function openHub() {
  await page.locator('[data-testid="nav-models"]').click();
  await page.locator('[data-testid="tab-hub"]').click();
  await page.locator('[data-testid="hub-page"]').waitFor();
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rigdeck-e2e-hub-"));
  const card = [
    "---",
    "license: apache-2.0",
    "base_model: rigdeck/tiny",
    "---",
    "# Tiny Llama",
    "",
    "A **tiny** model for the browser tests. <script>window.__cardRan = true</script>",
    "",
    '<img src="x" onerror="window.__cardRan = true">',
    "",
    "[a trap](javascript:window.__cardRan=true) and [the docs](https://example.com/docs)",
    "",
    "| Quant | Use |",
    "|---|---|",
    "| Q4_K_M | the tests |",
  ].join("\n");
  writeFileSync(join(dir, "README.md"), card);
  const spec = {
    repos: [
      {
        id: REPO,
        files: [
          { path: "README.md", source: join(dir, "README.md") },
          { path: "Tiny-Llama-Q4_K_M.gguf", source: required("RIGDECK_TINY_MODEL") },
          // Not a GGUF inside: its header cannot be read, so its fit is unknown.
          { path: "Tiny-Llama-Q8_0.gguf", size: 1048576 },
          // Part 2 of 2 was never uploaded.
          { path: "Tiny-Llama-Q2_K-00001-of-00002.gguf", size: 4096 },
          { path: "mmproj-F16.gguf", size: 2048 },
        ],
      },
      { id: OTHER, files: [{ path: "Big-Q4_K_M.gguf", size: 4096 }] },
      { id: GEMMA, files: [{ path: "gemma-3-270m-it-Q4_K_M.gguf", source: required("RIGDECK_GEMMA_MODEL") }] },
    ],
    throttle_bps: THROTTLE_BPS,
  };
  writeFileSync(join(dir, "spec.json"), JSON.stringify(spec));
  const candidate = (repo, params) => ({ repo, quant: "Q4_K_M", kind: "dense", params, approx_gb: 0.2, why: `${repo} for the browser test` });
  const catalog = {
    about: "The browser test's candidates.",
    models: [candidate(REPO, "tiny"), candidate(OTHER, "?"), candidate(ABSENT, "8B"), candidate(GEMMA, "270M")],
  };
  writeFileSync(join(dir, "catalog.json"), JSON.stringify(catalog));
  hub = await startFakeHub(join(dir, "spec.json"));

  const hfHome = join(dir, "hf");
  hubCache = join(hfHome, "hub");
  modelPath = join(hubCache, `models--rigdeck-test--Tiny-Llama-GGUF/snapshots/${COMMIT}/Tiny-Llama-Q4_K_M.gguf`);
  rigPath = join(dir, "rig.json");
  copyFileSync(join(fixtures, "4x3090.json"), rigPath);
  daemon = await startDaemon(relative(fixtures, rigPath), {
    env: {
      HF_ENDPOINT: hub.url,
      HF_HUB_CACHE: hubCache,
      HF_HOME: hfHome,
      // Nothing from this machine: no token, no llama.cpp cache in the model folders.
      HF_TOKEN: "",
      LLAMA_CACHE: join(dir, "llama.cpp"),
      RIGDECK_STARTER_CATALOG: join(dir, "catalog.json"),
    },
  });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  await browser?.close();
  await daemon?.stop();
  if (hub) {
    hub.child.kill("SIGTERM");
    await new Promise((done) => (hub.child.exitCode !== null || hub.child.signalCode !== null ? done() : hub.child.on("exit", done)));
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("an empty library offers the models recommended for this rig and the way to the hub", async () => {
  await page.locator('[data-testid="nav-models"]').click();
  const empty = page.locator('[data-testid="models-empty"]');
  await empty.waitFor({ timeout: 15_000 });
  const cards = empty.locator('[data-testid="recommended-model"]');
  await cards.first().waitFor({ timeout: 30_000 });
  // Ranked on the live rig, not in the catalog's order; what the hub lacks is not offered.
  assert.deepEqual(await cards.evaluateAll((els) => els.map((e) => e.dataset.repo)), [GEMMA, REPO]);
  assert.equal(await empty.locator(`[data-testid="recommended-model"][data-repo="${ABSENT}"]`).count(), 0);
  await page.locator('[data-testid="tab-hub"]').click();
  await page.locator('[data-testid="hub-page"]').waitFor();
  assert.match(page.url(), /#\/hub$/);
  assert.equal(await page.locator('[data-testid="nav-models"]').getAttribute("aria-current"), "page");
});

test("the library being empty, Recommended for this rig leads the hub page, ranked on the live rig", async () => {
  const start = page.locator('[data-testid="hub-start"]');
  const cards = start.locator('[data-testid="recommended-model"]');
  await cards.first().waitFor({ timeout: 30_000 });
  // Both real GGUFs fit on the 3090s' GPUs: the larger (Gemma 3 270M, 241 MiB) before the tiny
  // model (137 MiB); the file that is not a GGUF and the repository the hub lacks are left out.
  assert.deepEqual(await cards.evaluateAll((els) => els.map((e) => e.dataset.repo)), [GEMMA, REPO]);
  for (const repo of [GEMMA, REPO]) {
    const card = start.locator(`[data-testid="recommended-model"][data-repo="${repo}"]`);
    assert.equal(await card.locator('[data-testid="recommended-verdict"]').getAttribute("data-kind"), "on_gpus");
    assert.match(await card.locator('[data-testid="recommended-speed"]').textContent(), /^≤ \d+(\.\d)? tok\/s$/);
    assert.equal((await card.locator('[data-testid="recommended-quant"]').textContent()).trim(), "Q4_K_M");
    assert.match(await card.textContent(), new RegExp(`${repo} for the browser test`));
    const run = card.locator('[data-testid="recommended-run"]');
    assert.equal(await run.isEnabled(), true);
    assert.equal(await card.locator('[data-testid="recommended-details"]').getAttribute("href"), `#/hub/${repo}?quant=Q4_K_M`);
  }
  assert.match(await start.locator('[data-testid="recommended-size"]').first().textContent(), /241\.\d MiB/);
  const leftOut = start.locator('[data-testid="recommended-left-out"]');
  await leftOut.locator("summary").click();
  const reasons = await leftOut.textContent();
  assert.match(reasons, /2 not read from the hub/);
  assert.match(reasons, new RegExp(`${ABSENT}: .*not found`));
  assert.match(reasons, new RegExp(`${OTHER}: `));
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, "hub-recommended.png"), fullPage: true });
});

test("search lists the hub's models, narrows as one types, and filters by format", async () => {
  // The first visit lists the most downloaded models: both repositories.
  await until("the three repositories", () => document.querySelectorAll('[data-testid="hub-result"]').length === 3);
  await page.locator('[data-testid="hub-search"]').fill("tiny");
  await until("only the tiny model", (repo) => {
    const rows = [...document.querySelectorAll('[data-testid="hub-result"]')];
    return rows.length === 1 && rows[0].dataset.repo === repo && document.querySelector('[data-testid="hub-busy"]').textContent === "";
  }, REPO);
  assert.equal(await page.locator('[data-testid="hub-gated"]').count(), 0);
  // The fake hub tags its repositories gguf only.
  await page.locator('[data-testid="hub-format"] [data-value="safetensors"]').click();
  await page.locator('[data-testid="hub-no-results"]').waitFor();
  assert.match(await page.locator('[data-testid="hub-no-results"]').textContent(), /tiny.*safetensors/);
  await page.locator('[data-testid="hub-format"] [data-value="gguf"]').click();
  await page.locator(`[data-testid="hub-result"][data-repo="${REPO}"]`).waitFor();
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, "hub-search.png"), fullPage: true });
});

test("the model page lists the quantizations at once and fills in the fit", async () => {
  await page.locator(`[data-testid="hub-result"][data-repo="${REPO}"] [data-testid="hub-result-link"]`).click();
  await page.locator('[data-testid="hub-model-page"]').waitFor();
  assert.match(page.url(), /#\/hub\/rigdeck-test\/Tiny-Llama-GGUF$/);
  assert.equal((await page.locator('[data-testid="hub-model-id"]').textContent()).trim(), REPO);
  await row("Q4_K_M").waitFor();
  const labels = await page.locator('[data-testid="quant-label"]').allTextContents();
  assert.deepEqual(labels, ["Q2_K", "Q8_0", "Q4_K_M"], "smallest first");
  assert.equal((await row("Q4_K_M").locator('[data-testid="quant-files"]').textContent()).trim(), "1 file");
  assert.match(await row("Q4_K_M").locator('[data-testid="quant-size"]').textContent(), /137\.2 MiB/);

  // The incomplete upload says why and offers no download.
  assert.match(await row("Q2_K").locator('[data-testid="quant-missing"]').textContent(), /part 2 of 2 is missing/);
  assert.equal(await row("Q2_K").locator('[data-testid="quant-download"]').count(), 0);

  // The fit arrives after the files: the real GGUF fits on the GPUs and is recommended.
  const verdict = row("Q4_K_M").locator('[data-testid="fit-verdict"]');
  await verdict.waitFor({ timeout: 30_000 });
  assert.equal(await verdict.getAttribute("data-kind"), "on_gpus");
  assert.match(await verdict.textContent(), /on \d GPUs?/);
  assert.match(await verdict.getAttribute("title"), /^fits on the/);
  assert.equal(await row("Q4_K_M").locator('[data-testid="recommended"]').count(), 1);
  assert.equal(await page.locator('[data-testid="recommended"]').count(), 1);
  assert.match(await row("Q4_K_M").locator('[data-testid="quant-speed"]').textContent(), /^≤ \d+(\.\d)? tok\/s$/);
  const color = await verdict.evaluate((el) => getComputedStyle(el).color);
  assert.equal(color, "rgb(63, 185, 80)", "green: on the GPUs");
  // The quantization that is not a GGUF: unknown, with the reader's reason.
  assert.equal(await row("Q8_0").locator('[data-testid="fit-verdict"]').getAttribute("data-kind"), "unknown");
  assert.match(await row("Q8_0").locator('[data-testid="fit-error"]').textContent(), /not a GGUF file/);
  // Run on a row that fits; off, saying why, on the one whose fit is unknown; none on the
  // incomplete upload.
  assert.equal(await row("Q4_K_M").locator('[data-testid="run-model"]').isEnabled(), true);
  const noRun = row("Q8_0").locator('[data-testid="run-model"]');
  assert.equal(await noRun.isDisabled(), true);
  assert.match(await noRun.getAttribute("title"), /fit is unknown: .*not a GGUF file/);
  assert.equal(await row("Q2_K").locator('[data-testid="run-model"]').count(), 0);

  // Another context asks again.
  await page.locator('[data-testid="fit-context"] [data-value="131072"]').click();
  await until("the fit at 128K", () => document.querySelector('[data-testid="fit-context-shown"]')?.textContent === "at 128K", undefined, 30_000);
  await row("Q4_K_M").locator('[data-testid="recommended"]').waitFor();

  // Projectors and other files are apart; the card is rendered, its HTML inert.
  assert.equal(await page.locator('[data-testid="hub-projectors"]').count(), 1);
  const card = page.locator('[data-testid="model-card"]');
  await card.locator("h1").waitFor();
  assert.equal((await card.locator("h1").textContent()).trim(), "Tiny Llama");
  assert.equal(await card.locator("table td").first().textContent(), "Q4_K_M");
  assert.equal(await card.locator("script, img[onerror]").count(), 0);
  assert.match(await card.textContent(), /<script>window\.__cardRan = true<\/script>/, "shown as text");
  assert.doesNotMatch(await card.textContent(), /license: apache/, "front matter dropped");
  assert.equal(await card.locator('a[href^="javascript"]').count(), 0);
  assert.equal(await card.locator('a[href="https://example.com/docs"]').getAttribute("rel"), "noopener noreferrer");
  assert.equal(await page.evaluate(() => window.__cardRan ?? false), false);
});

test("the fit follows the live rig: a GPU another program frees is planned on, without a reload", async () => {
  // GPU 0 plays a card an engine holds 20 GiB of: the fit has little of it to use.
  const share = () => row("Q4_K_M").innerText();
  const before = await share();
  assert.match(before, /GPU 0\s+[\d.]+\/[0-3]\.\d/, before);
  const asked = [];
  const onRequest = (r) => r.url().endsWith("/api/v1/hub/fit") && asked.push(r.url());
  page.on("request", onRequest);
  const original = readFileSync(rigPath, "utf8");
  try {
    // The engine on GPU 0 stops.
    editRig((rig) => {
      rig.gpus[0].memory_used_mib = 500;
      rig.gpus[0].processes = [];
    });
    const started = Date.now();
    let after = before;
    while (after === before && Date.now() - started < 20_000) {
      // The verdict stays on show while the fit is asked again: no flicker to an empty cell.
      assert.equal(await row("Q4_K_M").locator('[data-testid="fit-verdict"]').count(), 1);
      await page.waitForTimeout(100);
      after = await share();
    }
    assert.match(after, /GPU 0\s+[\d.]+\/2\d\.\d/, `GPU 0 is free now: ${after}`);
    assert.ok(asked.length >= 1 && asked.length <= 2, `asked once the readings settled, not per frame: ${asked.length}`);
  } finally {
    writeFileSync(rigPath, original);
    page.off("request", onRequest);
  }
  await until(
    "the fit back on the busy card",
    () => /GPU 0\s+[\d.]+\/[0-3]\.\d/.test(document.querySelector('[data-testid="quant-row"][data-label="Q4_K_M"]')?.innerText ?? ""),
    undefined,
    20_000,
  );
});

test("check with llama.cpp asks the dry run of one quantization, read from the hub, and answers in its row", async () => {
  // The daemon reads the file's headers at its resolve address first: a wrong address would be
  // refused as a bad model. The rig has GPUs and no build is registered: said in plain words.
  await row("Q4_K_M").locator('[data-testid="quant-dry-run"]').click();
  const result = page.locator('[data-testid="quant-dry-run-result"][data-label="Q4_K_M"]');
  await result.waitFor({ timeout: 30_000 });
  assert.match(await result.textContent(), /no llama\.cpp build with llama-fit-params is registered for this rig/);
  assert.equal(await result.locator('[data-testid="quant-dry-run-engines"]').getAttribute("href"), "#/instances");
  // A file that is not a GGUF: the daemon's refusal, in that row only.
  await row("Q8_0").locator('[data-testid="quant-dry-run"]').click();
  const bad = page.locator('[data-testid="quant-dry-run-result"][data-label="Q8_0"]');
  await bad.waitFor({ timeout: 30_000 });
  assert.match(await bad.textContent(), /not a GGUF file/);
  assert.equal(await page.locator('[data-testid="quant-dry-run-result"]').count(), 2);
  assert.equal(await row("Q2_K").locator('[data-testid="quant-dry-run"]').count(), 0, "nothing to check in an incomplete upload");
  await page.screenshot({ path: join(artifacts, "hub-dry-run.png"), fullPage: true });
});

test("Download shows live progress, pauses and resumes, and finishes", async () => {
  await row("Q4_K_M").locator('[data-testid="quant-download"]').click();
  await download().waitFor();
  await until("the download running", (sel) => document.querySelector(sel)?.dataset.state === "running", `[data-testid="download"][data-label="Q4_K_M"]`);
  // Live progress: the bytes move while we watch, with a rate.
  const seen = new Set();
  const started = Date.now();
  while (seen.size < 3 && Date.now() - started < 20_000) {
    const text = await download().locator('[data-testid="download-bytes"]').textContent();
    if (/^\d/.test(text)) seen.add(text);
    await page.waitForTimeout(150);
  }
  assert.ok(seen.size >= 3, `progress moved: ${[...seen].join(" | ")}`);
  await download().locator('[data-testid="download-rate"]').filter({ hasText: /B\/s/ }).waitFor();
  assert.equal((await page.locator('[data-testid="downloads-underway"]').textContent()).trim(), "1 downloading");
  assert.match(await row("Q4_K_M").locator('[data-testid="quant-download-state"]').textContent(), /downloading \d+ %/);
  await page.screenshot({ path: join(artifacts, "hub-downloading.png"), fullPage: true });

  await download().locator('[data-testid="download-pause"]').click();
  await until("paused", () => document.querySelector('[data-testid="download"][data-label="Q4_K_M"]')?.dataset.state === "paused");
  assert.equal(await download().locator('[data-testid="download-resume"]').count(), 1);
  await download().locator('[data-testid="download-resume"]').click();
  await until(
    "done",
    () => document.querySelector('[data-testid="download"][data-label="Q4_K_M"]')?.dataset.state === "done",
    undefined,
    90_000,
  );
  assert.equal((await download().locator('[data-testid="download-state"]').textContent()).trim(), "done");
  assert.match(await download().locator('[data-testid="download-bytes"]').textContent(), /137\.2 MiB/);
  await row("Q4_K_M").locator('[data-testid="quant-download-state"]').filter({ hasText: "downloaded" }).waitFor();
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(artifacts, "hub.png"), fullPage: true });
});

test("the model lands in the library and Plan opens the placement editor on it", async () => {
  await page.locator('[data-testid="nav-models"]').click();
  const entry = page.locator(`[data-testid="model-row"][data-path="${modelPath}"]`);
  // The daemon rescans when a download finishes and sends library.changed.
  await entry.waitFor({ timeout: 20_000 });
  assert.equal(await entry.locator('[data-testid="model-problem"]').count(), 0);
  assert.equal(await entry.locator('[data-testid="run-model"]').isEnabled(), true, "a GGUF without a problem runs in one click");

  await page.locator('[data-testid="tab-hub"]').click();
  const plan = download().locator('[data-testid="download-plan"]');
  await plan.waitFor();
  await plan.click();
  await page.locator('[data-testid="plan-page"]').waitFor();
  assert.equal(new URL(page.url().replace("#/plan?", "x:/?")).searchParams.get("model"), modelPath);
  await page.locator('[data-testid="device-column"]').first().waitFor({ timeout: 20_000 });
  await page.locator('[data-testid="plan-verdict"]').waitFor();
  assert.equal((await page.locator('[data-testid="plan-verdict"]').textContent()).trim(), "fits");
  assert.match(await page.locator('[data-testid="plan-model-facts"]').textContent(), /4 layers/);
  const shot = join(artifacts, "hub-plan.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`hub screenshots saved to ${shot}, hub-search.png, hub-downloading.png and hub.png`);
});

test("Plan on a quantization's row opens the plan its fit verdict showed", async () => {
  await page.evaluate((hash) => (window.location.hash = hash), `#/hub/${REPO}`);
  const link = row("Q4_K_M").locator('[data-testid="quant-plan"]');
  await link.waitFor();
  await row("Q4_K_M").locator('[data-testid="fit-verdict"]').waitFor({ timeout: 30_000 });
  const params = new URL((await link.getAttribute("href")).replace("#/plan?", "x:/?")).searchParams;
  assert.equal(params.get("model"), modelPath);
  assert.equal(params.get("auto"), "1");
  assert.equal(params.get("context"), "131072", "the context the fit was planned at");
  const fitted = await adminRequest(daemon, "POST", "/api/v1/hub/fit", { repo: REPO, rig: "live", context: 131072 });
  const verdict = fitted.body.quants.find((q) => q.label === "Q4_K_M");

  await link.click();
  await page.locator('[data-testid="plan-page"]').waitFor();
  await until("the automatic plan", () => document.querySelector('[data-testid="plan-page"]')?.dataset.busy === "false" && !!document.querySelector('[data-testid="command-line"]'), undefined, 20_000);
  await page.getByText("automatic placement — edit freely").waitFor();
  const planned = await page.locator('[data-testid="command-line"]').textContent();
  assert.deepEqual(flagsPastModel(planned), flagsPastModel(verdict.command_line), `plan: ${planned}\nfit: ${verdict.command_line}`);
});

test("Downloaded models lists the model with its size, and Verify finds its files match the hub", async () => {
  await openHub();
  const item = cached();
  await item.waitFor({ timeout: 15_000 });
  assert.match(await item.locator('[data-testid="cached-model-size"]').textContent(), /^137\.2 MiB$/);
  assert.equal(await item.locator('[data-testid="cached-model-link"]').getAttribute("href"), "#/hub/rigdeck-test/Tiny-Llama-GGUF");
  const snapshot = item.locator('[data-testid="cached-snapshot"]');
  assert.equal(await snapshot.count(), 1);
  assert.equal(await snapshot.getAttribute("data-commit"), COMMIT);
  assert.match(await snapshot.textContent(), /main · 1 file/);
  // Downloads go to the Hugging Face cache unless the settings say otherwise.
  const where = page.locator('[data-testid="downloads-destination"]');
  assert.equal(await where.getAttribute("data-cache"), "true");
  assert.equal(await where.locator('[data-testid="downloads-destination-path"]').textContent(), hubCache);

  await item.locator('[data-testid="cache-verify"]').click();
  const result = item.locator('[data-testid="cache-verify-result"]');
  await result.waitFor({ timeout: 60_000 });
  assert.equal(await result.getAttribute("data-ok"), "true");
  assert.equal((await result.locator('[data-testid="cache-verify-summary"]').textContent()).trim(), "the 1 file matches the hub");
  assert.equal(await result.locator('[data-testid="cache-verify-newer"]').count(), 0, "the hub's main is where it was");
  assert.equal(await item.locator('[data-testid="cache-verify"]').isEnabled(), true);
  await page.screenshot({ path: join(artifacts, "hub-cache.png"), fullPage: true });

  // The model's page says it is downloaded, with the same size.
  await item.locator('[data-testid="cached-model-link"]').click();
  const line = page.locator('[data-testid="hub-model-cached"]');
  await line.waitFor();
  assert.match(await line.textContent(), /downloaded\s*·\s*137\.2 MiB/);
  assert.equal(await line.locator('[data-testid="cache-delete"]').count(), 1);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(artifacts, "hub-model-cached.png") });
});

test("Delete asks first, frees the model's space, and the model leaves the library", async () => {
  await openHub();
  const item = cached();
  await item.waitFor();
  await item.locator('[data-testid="cache-delete"]').click();
  const confirm = item.locator('[data-testid="cache-confirm"]');
  assert.match(await confirm.textContent(), /This frees 137\.2 MiB/);
  await page.screenshot({ path: join(artifacts, "hub-cache-delete.png") });
  // Keep leaves it alone.
  await confirm.locator("button", { hasText: "Keep" }).click();
  assert.equal(await item.locator('[data-testid="cache-confirm"]').count(), 0);
  assert.ok(existsSync(modelPath));

  await item.locator('[data-testid="cache-delete"]').click();
  await item.locator('[data-testid="cache-delete-confirm"]').click();
  const freed = page.locator('[data-testid="cache-panel"] [data-testid="cache-freed"]');
  await freed.waitFor({ timeout: 15_000 });
  assert.equal((await freed.textContent()).trim(), `Deleted ${REPO}: freed 137.2 MiB`);
  await until("the model gone from the panel", (repo) => !document.querySelector(`[data-testid="cached-model"][data-repo="${repo}"]`), REPO);
  await page.locator('[data-testid="cache-empty"]').waitFor();
  assert.ok(!existsSync(modelPath), "the file is gone from the cache");
  // Its finished download went with it: nothing offers Plan on a file that is gone.
  await until("the finished download forgotten", (repo) => !document.querySelector(`[data-testid="download"][data-repo="${repo}"]`), REPO);

  // The daemon rescans and the library loses it.
  await page.locator('[data-testid="nav-models"]').click();
  await until("the model gone from the library", (path) => !document.querySelector(`[data-testid="model-row"][data-path="${path}"]`), modelPath, 20_000);
  assert.equal(await page.locator(`[data-testid="model-row"][data-path="${modelPath}"]`).count(), 0);

  // Its page offers the download again and says nothing about a copy on disk.
  await page.goto(`${daemon.base}/#/hub/${REPO}`);
  await row("Q4_K_M").locator('[data-testid="quant-download"]').waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('[data-testid="hub-model-cached"]').count(), 0);
});

test("the download folder is set in the settings, shown where downloads are, and set back", async () => {
  const folder = join(dir, "downloads");
  mkdirSync(folder, { recursive: true });
  await page.locator('[data-testid="nav-settings"]').click();
  const section = page.locator('[data-testid="download-folder"]');
  const current = section.locator('[data-testid="download-folder-current"]');
  await current.waitFor();
  assert.equal(await current.getAttribute("data-cache"), "true");
  assert.match(await section.textContent(), /Hugging Face cache \(shared with hf, llama\.cpp -hf\) or a plain folder/);
  await until("the cache's path", (path) => document.querySelector('[data-testid="download-folder-current"]')?.textContent.includes(path), hubCache);

  // A relative path: the daemon's message, shown as is.
  await section.locator('[data-testid="download-folder-custom"]').check();
  await section.locator('[data-testid="download-folder-input"]').fill("models");
  await section.locator('[data-testid="download-folder-save"]').click();
  const error = section.locator('[data-testid="download-folder-error"]');
  await error.waitFor();
  assert.match(await error.textContent(), /folder 'models' is not an absolute path/);

  await section.locator('[data-testid="download-folder-input"]').fill(folder);
  await section.locator('[data-testid="download-folder-save"]').click();
  await section.locator('[data-testid="download-folder-saved"]').waitFor();
  assert.equal(await current.getAttribute("data-cache"), "false");
  assert.match(await current.textContent(), new RegExp(`Now: ${folder}`));
  assert.equal(await section.locator('[data-testid="download-folder-error"]').count(), 0);
  await section.screenshot({ path: join(artifacts, "settings-download-folder.png") });

  await openHub();
  const where = page.locator('[data-testid="downloads-destination"]');
  await until("the folder shown where downloads are", () => document.querySelector('[data-testid="downloads-destination"]')?.dataset.cache === "false");
  assert.equal(await where.locator('[data-testid="downloads-destination-path"]').textContent(), folder);
  // The cache's models are still listed, with where they are.
  assert.match(await page.locator('[data-testid="cache-where"]').textContent(), /downloads now go to the folder/);

  // Back to the Hugging Face cache; a reload reads it from the daemon.
  await page.locator('[data-testid="nav-settings"]').click();
  await section.locator('[data-testid="download-folder-cache"]').check();
  await section.locator('[data-testid="download-folder-save"]').click();
  await until("the cache again", () => document.querySelector('[data-testid="download-folder-current"]')?.dataset.cache === "true");
  await page.reload();
  await page.locator('[data-testid="download-folder-current"]').waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('[data-testid="download-folder-current"]').getAttribute("data-cache"), "true");
  await openHub();
  await until("downloads going to the cache again", () => document.querySelector('[data-testid="downloads-destination"]')?.dataset.cache === "true");
});

test("the token box sets and removes a token without ever showing it", async () => {
  await page.locator('[data-testid="nav-models"]').click();
  await page.locator('[data-testid="tab-hub"]').click();
  const box = page.locator('[data-testid="hub-token"]');
  await box.locator('[data-testid="hub-token-state"]').filter({ hasText: "not set" }).waitFor();
  await box.locator('[data-testid="hub-token-set"]').click();
  await box.locator('[data-testid="hub-token-input"]').fill(TOKEN);
  assert.equal(await box.locator('[data-testid="hub-token-input"]').getAttribute("type"), "password");
  await box.locator('[data-testid="hub-token-save"]').click();
  await box.locator('[data-testid="hub-token-state"]').filter({ hasText: /^set$/ }).waitFor();
  assert.match(await box.textContent(), /saved in Rigdeck/);
  assert.ok(!(await page.content()).includes(TOKEN), "the token is nowhere in the page");
  await box.locator('[data-testid="hub-token-remove"]').click();
  await box.locator('[data-testid="hub-token-state"]').filter({ hasText: "not set" }).waitFor();
});
