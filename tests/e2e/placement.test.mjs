// The model library and the placement editor in a real browser against a real daemon playing the
// 4× RTX 3090 rig, with a GLM-5.2-shaped split model (78 layers, 256 experts, MLA; sparse files)
// written by the `plan_bench` example into the daemon's models folder. Then llama.cpp's dry run
// beside the plan: refused in plain words on the GPU rig (only a CPU build is registered, the
// cached llama-server of RIGDECK_LLAMA_SERVER), and measured on the CPU-only preset for the tiny
// real GGUF of RIGDECK_TINY_MODEL; the next plan then says how far the estimate was off on this
// rig, and so does the library for models of that architecture.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary (with llama-fit-params beside it)");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const SHARD = "GLM-5.2-IQ2-00001-of-00006.gguf";

let daemon;
let browser;
let page;
let modelPath;

/** Writes the GLM-5.2 fixture with the plan_bench example (built by the Makefile). */
function writeGlmFixture(dir) {
  const bench = process.env.RIGDECK_PLAN_BENCH;
  if (!bench) {
    throw new Error(
      "RIGDECK_PLAN_BENCH is not set: point it at the plan_bench example, e.g. " +
        "`cargo build --release -p rigdeck-placement --example plan_bench` then " +
        "RIGDECK_PLAN_BENCH=$CARGO_TARGET_DIR/release/examples/plan_bench",
    );
  }
  mkdirSync(dir, { recursive: true });
  execFileSync(bench, [dir], { stdio: ["ignore", "ignore", "inherit"] });
}

const column = (device) => page.locator(`[data-testid="device-column"][data-device="${device}"]`);
const commandLine = () => page.locator('[data-testid="command-line"]').textContent();

/** Waits until `fn` (run in the page) is true; `what` names it in the failure. */
async function until(what, fn, arg, timeout = 10_000) {
  try {
    await page.waitForFunction(fn, arg, { timeout });
  } catch (e) {
    throw new Error(`timed out waiting for ${what}: ${e.message.split("\n")[0]}`);
  }
}

before(async () => {
  daemon = await startDaemon("4x3090.json", {
    prepare: ({ dataDir }) => writeGlmFixture(join(dataDir, "models", "glm")),
  });
  modelPath = join(daemon.dataDir, "models", "glm", SHARD);
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  await browser?.close();
  await daemon?.stop();
});

test("Models lists the GLM-5.2 split model with its facts", async () => {
  await page.locator('[data-testid="nav-models"]').click();
  const row = page.locator(`[data-testid="model-row"][data-path="${modelPath}"]`);
  await row.waitFor({ timeout: 20_000 });
  assert.match(await row.locator('[data-testid="model-name"]').textContent(), /GLM-5\.2/);
  assert.equal((await row.locator('[data-testid="model-layers"]').textContent()).trim(), "78");
  assert.match(await row.locator('[data-testid="model-experts"]').textContent(), /256 total · 8 active · 1 shared/);
  assert.match(await row.locator('[data-testid="model-attention"]').textContent(), /MLA/);
  assert.match(await row.locator('[data-testid="quant-bar"]').textContent(), /IQ2_XXS/);
  assert.ok((await row.locator('[data-testid="quant-type"]').count()) >= 3, "a per-type histogram, not one label");
  assert.match(await row.textContent(), /6 files/);
  assert.equal(await row.locator('[data-testid="model-problem"]').count(), 0);
});

test("a broken model dropped into the folder shows up by itself, its problem in red", async () => {
  writeFileSync(join(daemon.dataDir, "models", "broken.gguf"), Buffer.from("GGUF\x03\x00\x00\x00 truncated"));
  const broken = page.locator('[data-testid="model-row"]', { has: page.locator('[data-testid="model-problem"]') });
  // No reload and no Rescan click: the daemon rescans every 10 s and sends library.changed.
  await broken.first().waitFor({ timeout: 25_000 });
  const problem = broken.first().locator('[data-testid="model-problem"]');
  assert.match(await problem.textContent(), /broken\.gguf|offset|truncat|end of file/i);
  const color = await problem.evaluate((el) => getComputedStyle(el).color);
  assert.equal(color, "rgb(248, 81, 73)");
});

test("the editor opens on the 4× 3090 preset, one column per device", async () => {
  await page.locator(`[data-testid="model-row"][data-path="${modelPath}"] [data-testid="plan-model"]`).click();
  await page.locator('[data-testid="plan-page"]').waitFor();
  await page.locator('[data-testid="rig-select"] option[value="4x3090"]').waitFor({ state: "attached" });
  await page.locator('[data-testid="rig-select"]').selectOption("4x3090");
  await until("the preset's columns", () => {
    const cols = [...document.querySelectorAll('[data-testid="device-column"]')].map((c) => c.dataset.device);
    return cols.join(",") === "gpu-0,gpu-1,gpu-2,gpu-3,cpu";
  });
  assert.match(page.url(), /#\/plan\?model=.*&rig=4x3090/);
  assert.equal(await column("gpu-3").locator('[data-testid="link-degraded"]').count(), 1, "the x1 card is marked");
  assert.equal(await column("gpu-0").locator('[data-testid="link-degraded"]').count(), 0);
  // llama-server's defaults put all 78 layers with their experts on four 24 GB cards: red, with amounts.
  await until("an overflowing default plan", () => document.querySelector('[data-overflow="true"]') != null);
  assert.match(await page.locator('[data-overflow="true"] [data-testid="device-overflow"]').first().textContent(), /over by \d+\.\d GiB/);
  assert.equal(await page.locator('[data-testid="layer-block"]').count(), 78);
});

let autoLine;

test("automatic placement fits every device and writes -ot flags", async () => {
  await page.locator('[data-testid="auto-place"]').click();
  await until(
    "a fitting plan with -ot",
    () =>
      document.querySelector('[data-testid="plan-page"]')?.dataset.busy === "false" &&
      document.querySelectorAll('[data-testid="device-column"][data-overflow="true"]').length === 0 &&
      (document.querySelector('[data-testid="command-line"]')?.textContent ?? "").includes(" -ot "),
  );
  autoLine = await commandLine();
  assert.match(autoLine, /^llama-server -m \S+GLM-5\.2-IQ2-00001-of-00006\.gguf -ngl all -ts /);
  // The CPU catch-all comes last.
  const ots = [...autoLine.matchAll(/-ot '([^']+)'/g)].map((m) => m[1]);
  assert.ok(ots.length >= 2, autoLine);
  assert.match(ots.at(-1), /exps=CPU$/);
  assert.match(await page.locator('[data-testid="ceiling"]').textContent(), /^≤ \d+(\.\d)? tok\/s decode$/);
  assert.match(await page.locator('[data-testid="ceiling-panel"]').textContent(), /upper bound/);
  assert.equal(await page.locator('[data-testid="plan-problem"]').count(), 0);
  // Experts live apart from their layers: some on the GPUs, the rest in CPU RAM.
  assert.ok((await column("cpu").locator('[data-testid="expert-block"]').count()) > 10);
  assert.ok((await column("gpu-0").locator('[data-testid="expert-block"]').count()) > 0);
  // "Save as launch profile" is on screen at 1280×800 without scrolling, above the long columns.
  assert.equal(await page.evaluate(() => window.scrollY), 0);
  const { height } = page.viewportSize();
  const save = await page.locator('[data-testid="save-profile"]').boundingBox();
  assert.ok(save && save.y >= 0 && save.y + save.height <= height, `the save panel lies within the ${height} px viewport: ${JSON.stringify(save)}`);
});

test("moving an expert block to another GPU changes the bars and the flags; dragging it back undoes it", async () => {
  const block = column("cpu").locator('[data-testid="expert-block"]').nth(20);
  const layer = await block.getAttribute("data-layer");
  const gpu3Before = await column("gpu-3").locator('[data-testid="device-usage"]').textContent();
  const cpuBefore = await column("cpu").locator('[data-testid="device-usage"]').textContent();
  await block.click();
  assert.equal(await block.getAttribute("aria-pressed"), "true");
  await page.locator('[data-testid="move-to"][data-device="gpu-3"]').click();
  const moved = column("gpu-3").locator(`[data-testid="expert-block"][data-layer="${layer}"]`);
  await moved.waitFor();
  await until("the new plan", (before) => document.querySelector('[data-testid="command-line"]')?.textContent !== before, autoLine);
  await until("GPU 3's bar", (before) => {
    const el = document.querySelector('[data-testid="device-column"][data-device="gpu-3"] [data-testid="device-usage"]');
    return el && el.textContent !== before;
  }, gpu3Before);
  const line = await commandLine();
  assert.ok(line.includes(`-ot 'blk\\.${layer}\\.ffn_.*_exps=CUDA3'`), line);
  const ots = [...line.matchAll(/-ot '([^']+)'/g)].map((m) => m[1]);
  assert.match(ots.at(-1), /exps=CPU$/, "the catch-all stays last");
  assert.notEqual(await column("cpu").locator('[data-testid="device-usage"]').textContent(), cpuBefore);
  mkdirSync(artifacts, { recursive: true });
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(artifacts, "placement-edited.png"), fullPage: true });

  // Drag and drop: back to the CPU column gives the automatic plan's flags again.
  await moved.dragTo(column("cpu"));
  await column("cpu").locator(`[data-testid="expert-block"][data-layer="${layer}"]`).waitFor();
  await until("the original flags", (want) => document.querySelector('[data-testid="command-line"]')?.textContent === want, autoLine);
});

test("a pasted -ot regex that does not compile is reported verbatim by the box", async () => {
  await page.locator('[data-testid="paste-input"]').fill(`llama-server -m ${modelPath} -ot 'blk\\.(3=CUDA0'`);
  await page.locator('[data-testid="paste-submit"]').click();
  const error = page.locator('[data-testid="paste-error"]');
  await error.waitFor();
  assert.match(await error.textContent(), /bad_command.*-ot.*not a valid regular expression/s);
});

test("the seed's -ncmoe command is drawn with experts piled on one card", async () => {
  await page.locator('[data-testid="paste-input"]').fill(`llama-server -m ${modelPath} -c 32768 -ngl 99 -ncmoe 60 --host 0.0.0.0`);
  await page.locator('[data-testid="paste-submit"]').click();
  await until("the pasted plan's problems", () =>
    [...document.querySelectorAll('[data-testid="plan-problem"]')].some((p) => p.textContent.includes("all experts kept on GPUs sit on GPU 3")),
  );
  assert.equal(await page.locator('[data-testid="paste-error"]').count(), 0);
  assert.equal(await column("gpu-3").getAttribute("data-overflow"), "true");
  assert.match(await column("gpu-3").locator('[data-testid="device-overflow"]').textContent(), /over by \d+\.\d GiB/);
  assert.equal(await column("gpu-0").locator('[data-testid="expert-block"]').count(), 0);
  assert.equal(await column("gpu-3").locator('[data-testid="expert-block"]').count(), 18);
  assert.match(await page.locator('[data-testid="paste-notes"]').textContent(), /-np/);
  assert.match(await commandLine(), /-ngl 99 .*-ot 'blk\\\.0\\\.ffn_\(up\|down\|gate\|gate_up\)_\(ch\|\)exps=CPU'/);
  await page.evaluate(() => window.scrollTo(0, 0));
  const shot = join(artifacts, "placement.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`placement screenshots saved to ${shot} and placement-edited.png`);
});

const dryRunPanel = () => page.locator('[data-testid="dry-run-panel"]');

test("on the GPU rig the llama.cpp dry run says no build is registered for it, with the way to Engines", async () => {
  await page.locator('[data-testid="rig-select"]').selectOption("live");
  await dryRunPanel().waitFor();
  // Our plan is on show at once; llama.cpp's answer fills in by itself.
  await until("the dry run's answer", () => document.querySelector('[data-testid="dry-run-panel"]')?.dataset.state === "unavailable", undefined, 15_000);
  const message = dryRunPanel().locator('[data-testid="dry-run-error"]');
  assert.match(await message.textContent(), /no llama\.cpp build with llama-fit-params is registered for this rig/);
  assert.equal(await message.getAttribute("data-no-build"), "true");
  assert.equal(await dryRunPanel().locator('[data-testid="dry-run-engines"]').getAttribute("href"), "#/instances");
  assert.equal(await dryRunPanel().locator('[data-testid="dry-run-table"]').count(), 0);
});

test("with a CPU build registered, the dry run of the tiny model on the CPU-only preset sets llama.cpp's figures beside ours", async () => {
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: {
      ...process.env,
      RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"),
      RIGDECK_DATA_DIR: daemon.dataDir,
      RUST_LOG: "warn",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  await page.goto(`${daemon.base}/#/plan?model=${encodeURIComponent(tinyModel)}`);
  await page.locator('[data-testid="plan-page"]').waitFor();
  await page.locator('[data-testid="ctx-input"]').fill("4096");
  // The live rig has GPUs: a CPU build cannot measure a plan on them, and says so.
  await until("the GPU rig's refusal", () => /no llama\.cpp build/.test(document.querySelector('[data-testid="dry-run-error"]')?.textContent ?? ""), undefined, 20_000);

  await page.locator('[data-testid="rig-select"]').selectOption("cpu-minipc");
  await until("the CPU-only preset's columns", () =>
    [...document.querySelectorAll('[data-testid="device-column"]')].map((c) => c.dataset.device).join(",") === "cpu",
  );
  // Never blocked on llama.cpp: our plan is up while the dry run runs.
  await until("llama.cpp's table", () => document.querySelector('[data-testid="dry-run-row"][data-device="Host"]') != null, undefined, 60_000);
  const host = dryRunPanel().locator('[data-testid="dry-run-row"][data-device="Host"]');
  assert.match(await dryRunPanel().locator('[data-testid="dry-run-build"]').textContent(), /^llama\.cpp .+ cpu$/);
  for (const part of ["model", "context", "compute"]) {
    assert.match(await host.locator(`[data-part="${part}"] [data-testid="dry-run-mib"]`).textContent(), /^\d+ \/ \d+$/, part);
    assert.match(await host.locator(`[data-part="${part}"] [data-testid="dry-run-diff"]`).textContent(), /^(0|[+−]\d+(\.\d)?) %$|^new$/, part);
  }
  // The weights are the same bytes on both sides.
  assert.equal(await host.locator('[data-part="model"] [data-testid="dry-run-diff"]').getAttribute("data-tone"), "same");
  assert.match(await dryRunPanel().locator('[data-testid="dry-run-note"]').textContent(), /compute/i);
  assert.match(await dryRunPanel().locator('[data-testid="dry-run-notes"]').textContent(), /-kvu/);
  const args = dryRunPanel().locator('[data-testid="dry-run-args"]');
  assert.equal(await args.getAttribute("open"), null, "the flags start collapsed");
  await args.locator("summary").click();
  assert.match(await args.locator("pre").textContent(), /-fitp on/);
  assert.equal(await dryRunPanel().locator('[data-testid="dry-run-error"]').count(), 0);
  await page.evaluate(() => window.scrollTo(0, 0));
  const shot = join(artifacts, "placement-dry-run.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`dry run screenshot saved to ${shot}`);
});

test("after the dry run, the next plan of the tiny model says how far the estimate was off on this rig, and Models says it of the model", async () => {
  // The dry run above kept llama.cpp's figures next to ours: the next plan of the same
  // architecture on the same device model (host memory, CPU build) is corrected by them.
  await page.locator('[data-testid="ctx-input"]').fill("2048");
  const note = page.locator('[data-testid="calibration-note"][data-device="cpu"]');
  await until("the CPU column's calibration note", () => document.querySelector('[data-testid="calibration-note"][data-device="cpu"]') != null, undefined, 20_000);
  assert.equal(await note.count(), 1);
  assert.equal(await column("cpu").locator('[data-testid="calibration-note"]').count(), 1, "the note sits in its device's column");
  assert.match((await note.locator('[data-testid="calibration-off"]').textContent()).trim(), /^([+−]\d+(\.\d)?|0) %$/);
  assert.equal((await note.locator('[data-testid="calibration-source"]').textContent()).trim(), "llama.cpp dry run");
  assert.match(await note.textContent(), /Estimate off by .+ on this rig last time \(llama\.cpp dry run, (just now|\d+ (s|min) ago)\)/);
  assert.match(await note.textContent(), /figures corrected: compute × \d+\.\d\d|no correction needed/);
  assert.match(await note.getAttribute("title"), /Records for llama on CPU \(cpu\): \d+ dry runs?, 0 measured engines/);
  await page.locator('[data-testid="ctx-input"]').fill("4096");
  await until("the plan back at 4096", () => document.querySelector('[data-testid="plan-page"]')?.dataset.busy === "false");
  assert.equal(await page.locator('[data-testid="calibration-note"][data-device="cpu"]').count(), 1);
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(artifacts, "placement-calibration-plan.png"), fullPage: true });

  // In the library, a model of the same architecture (the tiny model, copied into the models
  // folder) carries the last check; the GLM-5.2 fixture (another architecture) none.
  const tinyInLibrary = join(daemon.dataDir, "models", "tiny-llama.gguf");
  copyFileSync(tinyModel, tinyInLibrary);
  await page.locator('[data-testid="nav-models"]').click();
  await page.locator('[data-testid="rescan"]').click();
  const row = page.locator(`[data-testid="model-row"][data-path="${tinyInLibrary}"]`);
  await row.waitFor({ timeout: 20_000 });
  const badge = row.locator('[data-testid="model-calibration"]');
  await badge.waitFor({ timeout: 10_000 });
  assert.match((await badge.textContent()).trim(), /^estimate off by ([+−]\d+(\.\d)?|0) % on this rig last time$/);
  assert.match(await badge.getAttribute("title"), /^CPU \(cpu\): ([+−]\d+(\.\d)?|0) % · llama\.cpp dry run, /m);
  assert.equal(await page.locator(`[data-testid="model-row"][data-path="${modelPath}"] [data-testid="model-calibration"]`).count(), 0);
  const shot = join(artifacts, "placement-calibration.png");
  await row.screenshot({ path: shot });
  console.log(`calibration screenshots saved to ${shot} and placement-calibration-plan.png`);
});

test("with a second 2×3090 box over 2.5 GbE the lent cards are columns named by their box, and the link is counted", async () => {
  await page.locator('[data-testid="nav-models"]').click();
  await page.locator(`[data-testid="model-row"][data-path="${modelPath}"] [data-testid="plan-model"]`).click();
  await page.locator('[data-testid="plan-page"]').waitFor();
  await page.locator('[data-testid="rig-select"]').selectOption("4x3090");
  await until("the preset's columns", () => document.querySelectorAll('[data-testid="device-column"]').length === 5);
  await page.locator('[data-testid="add-box"]').click();
  assert.equal(await page.locator('[data-testid="also-preset"]').inputValue(), "2x3090");
  assert.equal(await page.locator('[data-testid="also-link"]').inputValue(), "2.5gbe");
  await until("the lent cards' columns", () => {
    const cols = [...document.querySelectorAll('[data-testid="device-column"]')].map((c) => c.dataset.device);
    return cols.join(",") === "gpu-0,gpu-1,gpu-2,gpu-3,rpc-0,rpc-1,cpu";
  });
  assert.match(await column("rpc-1").locator('[data-testid="lent-box"]').textContent(), /^box 2 · 2x3090 over 2\.5 GbE$/);
  await page.locator('[data-testid="auto-place"]').click();
  await until(
    "a fitting plan across the boxes",
    () =>
      document.querySelector('[data-testid="plan-page"]')?.dataset.busy === "false" &&
      (document.querySelector('[data-testid="command-line"]')?.textContent ?? "").includes(" --rpc box2:50052 "),
    undefined,
    30_000,
  );
  const line = await commandLine();
  assert.match(line, / -dev RPC0,RPC1,CUDA0,CUDA1,CUDA2,CUDA3 -ngl all -ts /);
  assert.ok((await column("rpc-0").locator('[data-testid="layer-block"]').count()) > 0, "layers on the lent card");
  assert.match(await page.locator('[data-testid="ceiling-links"]').textContent(), /box 2 · 2x3090 over 2\.5 GbE: \d+ crossings a token, \d+\.\d\d ms; loading sends \d+\.\d GiB, \d+ s/);
  // llama-fit-params would need the lent boxes' rpc-servers: no dry run is asked, so none fails.
  assert.equal(await page.locator('[data-testid="dry-run-error"]').count(), 0);
  const shot = join(artifacts, "placement-across-boxes.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`across-boxes screenshot saved to ${shot}`);
});

/** The -ts shares of a command line, and how often a token crosses the link to box 2. */
const tsOf = (line) => / -ts (\S+) /.exec(line)?.[1].split(",").map(Number);
const crossings = async () => Number(/(\d+) crossings? a token/.exec(await page.locator('[data-testid="ceiling-links"]').textContent())?.[1]);

test("on a rig of two boxes a layer dragged onto RPC0 moves by -ts in -dev order, or by -ot to RPC0[box2:50052], and the pasted command reads back", async () => {
  const autoAcross = await commandLine();
  const ts = tsOf(autoAcross);
  assert.equal(ts.length, 6, autoAcross);
  // The first layer of RPC1 onto RPC0: the boundary between them moves, -dev stays.
  const first = column("rpc-1").locator('[data-testid="layer-block"]').first();
  const layer = await first.getAttribute("data-layer");
  await first.dragTo(column("rpc-0"));
  await column("rpc-0").locator(`[data-testid="layer-block"][data-layer="${layer}"]`).waitFor();
  await until("the new plan", (before) => {
    const line = document.querySelector('[data-testid="command-line"]')?.textContent ?? "";
    return line !== before && document.querySelector('[data-testid="plan-page"]')?.dataset.busy === "false";
  }, autoAcross);
  let line = await commandLine();
  assert.match(line, / --rpc box2:50052 -dev RPC0,RPC1,CUDA0,CUDA1,CUDA2,CUDA3 -ngl all -ts /);
  assert.deepEqual(tsOf(line), [ts[0] + 1, ts[1] - 1, ...ts.slice(2)], line);
  assert.equal(await page.locator('[data-testid="plan-error"]').count(), 0);

  // A layer from the middle of GPU 1's range onto RPC0: an -ot entry to the lent device by its
  // server's name.
  const gpu1 = column("gpu-1").locator('[data-testid="layer-block"]');
  const middle = gpu1.nth(Math.floor((await gpu1.count()) / 2));
  const away = await middle.getAttribute("data-layer");
  await middle.dragTo(column("rpc-0"));
  await column("rpc-0").locator(`[data-testid="layer-block"][data-layer="${away}"]`).waitFor();
  await until("the -ot entry to RPC0", (want) => (document.querySelector('[data-testid="command-line"]')?.textContent ?? "").includes(want), `-ot 'blk\\.${away}\\.=RPC0[box2:50052]'`);
  line = await commandLine();
  assert.deepEqual(tsOf(line), [ts[0] + 1, ts[1] - 1, ...ts.slice(2)], line);

  // The experts of the last layer (on this box) from CPU RAM onto RPC0 by the move bar: the token
  // goes to box 2 and back for them, two more crossings.
  const before = await crossings();
  const experts = column("cpu").locator('[data-testid="expert-block"]').last();
  const expertsLayer = await experts.getAttribute("data-layer");
  await experts.click();
  await page.locator('[data-testid="move-to"][data-device="rpc-0"]').click();
  await column("rpc-0").locator(`[data-testid="expert-block"][data-layer="${expertsLayer}"]`).waitFor();
  // They join RPC0's experts entry (or make one), named by RPC0's server.
  const rpc0Experts = (want) =>
    [...(document.querySelector('[data-testid="command-line"]')?.textContent ?? "").matchAll(/-ot 'blk\\\.\(?([\d|]+)\)?\\\.ffn_\.\*_exps=RPC0\[box2:50052\]'/g)].some((m) => m[1].split("|").includes(want));
  await until("the experts' -ot entry to RPC0", rpc0Experts, expertsLayer);
  assert.equal(await crossings(), before + 2);
  line = await commandLine();
  assert.match([...line.matchAll(/-ot '([^']+)'/g)].map((m) => m[1]).at(-1), /exps=CPU$/, "the catch-all stays last");
  const rpc0Layers = await column("rpc-0").locator('[data-testid="layer-block"]').evaluateAll((els) => els.map((e) => e.dataset.layer).join(","));
  const rpc0Usage = await column("rpc-0").locator('[data-testid="device-usage"]').textContent();
  const shot = join(artifacts, "placement-across-boxes-moved.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`across-boxes move screenshot saved to ${shot}`);

  // The command pasted back draws the same columns.
  await page.locator('[data-testid="paste-input"]').fill(line);
  await page.locator('[data-testid="paste-submit"]').click();
  await until("the pasted plan", () => document.querySelector('[data-testid="paste-drawn"]') != null || document.querySelector('[data-testid="paste-error"]') != null);
  assert.equal(await page.locator('[data-testid="paste-error"]').count(), 0);
  await until("the pasted plan drawn", () => document.querySelector('[data-testid="plan-page"]')?.dataset.busy === "false");
  assert.equal(await column("rpc-0").locator('[data-testid="layer-block"]').evaluateAll((els) => els.map((e) => e.dataset.layer).join(",")), rpc0Layers);
  assert.equal(await column("rpc-0").locator('[data-testid="device-usage"]').textContent(), rpc0Usage);
  assert.equal(await commandLine(), line);

  // Experts of every layer in CPU RAM onto RPC1 overfill it, shown as on a card of this box.
  const cpuExperts = column("cpu").locator('[data-testid="expert-block"]');
  await cpuExperts.first().click();
  await cpuExperts.last().click({ modifiers: ["Shift"] });
  await page.locator('[data-testid="move-to"][data-device="rpc-1"]').click();
  await until("RPC1 overfilled", () => document.querySelector('[data-testid="device-column"][data-device="rpc-1"]')?.dataset.overflow === "true");
  assert.match(await column("rpc-1").locator('[data-testid="device-overflow"]').textContent(), /over by \d+\.\d GiB/);
  assert.equal(await column("rpc-1").locator('[data-testid="device-usage"].bad').count(), 1);
  await page.locator('[data-testid="also-remove"]').click();
  await until("this box's columns again", () => document.querySelectorAll('[data-testid="device-column"]').length === 5);
});
