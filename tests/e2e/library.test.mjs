// "I already have models" in a real browser against a real daemon whose home folder holds an
// Ollama store laid out as Ollama lays it out (a manifest per tag, the GGUF as a digest-named blob)
// with one tag whose blob is missing: the empty library offers the found folder with its count,
// size and the broken tag's one line; Add puts the model in the library under its tag, read in
// place (its path is the blob); the folder then shows "Added"; a path that does not exist gets one
// clear line and a real folder typed into the path field is added too.
// Needs RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let dir;
let home;
let store;
let blob;
let daemon;
let browser;
let page;

/** Writes the manifest of `registry.ollama.ai/library/<model>/<tag>` naming `digest` of `size`. */
function writeManifest(model, tag, digest, size) {
  const path = join(store, "manifests/registry.ollama.ai/library", model, tag);
  mkdirSync(dirname(path), { recursive: true });
  const layers = [
    { mediaType: "application/vnd.ollama.image.model", digest, size },
    { mediaType: "application/vnd.ollama.image.params", digest: `sha256:${"0".repeat(63)}1`, size: 30 },
  ];
  writeFileSync(path, JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.docker.distribution.manifest.v2+json", layers }));
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rigdeck-e2e-library-"));
  home = join(dir, "home");
  store = join(home, ".ollama/models");
  mkdirSync(join(store, "blobs"), { recursive: true });
  const hex = createHash("sha256").update(readFileSync(tinyModel)).digest("hex");
  blob = join(store, "blobs", `sha256-${hex}`);
  copyFileSync(tinyModel, blob);
  writeManifest("tiny", "q4", `sha256:${hex}`, statSync(blob).size);
  writeManifest("qwen3", "8b", `sha256:${"ab".repeat(32)}`, 5_027_783_488);
  daemon = await startDaemon("2x5060ti.json", {
    env: {
      // Only the test's home: no model folder of this machine is found or scanned.
      HOME: home,
      XDG_CACHE_HOME: join(home, ".cache"),
      HF_HOME: join(home, ".cache/huggingface"),
      HF_HUB_CACHE: join(home, ".cache/huggingface/hub"),
      LLAMA_CACHE: join(home, ".cache/llama.cpp"),
      OLLAMA_MODELS: store,
      HF_TOKEN: "",
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
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the empty library offers Ollama's folder with its models, size and broken tag", async () => {
  await page.locator('[data-testid="nav-models"]').click();
  const empty = page.locator('[data-testid="models-empty"]');
  await empty.waitFor({ timeout: 15_000 });
  const row = empty.locator('[data-testid="found-folder"][data-tool="Ollama"]');
  await row.waitFor({ timeout: 15_000 });
  assert.equal(await empty.locator('[data-testid="found-folder"]').count(), 1, "only the test's home is searched");
  const line = await row.locator(".what").innerText();
  const mib = (statSync(blob).size / 1024 ** 2).toFixed(1);
  assert.equal(line, `Ollama · ~/.ollama/models · 2 models · ${mib} MiB`);
  const problems = await row.locator('[data-testid="found-folder-problem"]').allInnerTexts();
  assert.deepEqual(problems, [
    `qwen3:8b: Ollama's qwen3:8b names blob sha256-${"ab".repeat(32)} which is not in ${join(store, "blobs")}: run \`ollama pull qwen3:8b\` again`,
  ]);
  mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: join(artifacts, "library-found-folders.png"), fullPage: true });
});

test("Add puts the tag in the library under its name, read in place", async () => {
  await page.locator('[data-testid="found-folder"][data-tool="Ollama"] [data-testid="found-folder-add"]').click();
  const tiny = page.locator('[data-testid="model-row"]', { has: page.locator('[data-testid="model-name"]', { hasText: /^tiny:q4$/ }) });
  await tiny.waitFor({ timeout: 15_000 });
  assert.equal(await tiny.getAttribute("data-path"), blob);
  assert.equal(await tiny.locator('[data-testid="model-source"]').innerText(), "Ollama");
  assert.equal(await tiny.locator('[data-testid="model-problem"]').count(), 0);
  await tiny.locator('[data-testid="plan-model"]').waitFor();
  const broken = page.locator('[data-testid="model-row"]', { has: page.locator('[data-testid="model-name"]', { hasText: /^qwen3:8b$/ }) });
  assert.match(await broken.locator('[data-testid="model-problem"]').innerText(), /names blob sha256-(ab){32} which is not in .*: run `ollama pull qwen3:8b` again$/);
  // Its blob is not there: no file is claimed for it.
  assert.match(await broken.locator(".where").innerText(), /0 files$/);
  // No blob shows up as a model of its own.
  assert.equal(await page.locator('[data-testid="model-row"]').count(), 2);

  const find = page.locator('[data-testid="find-on-machine"]');
  await find.locator("summary").click();
  await find.locator('[data-testid="found-folder"][data-tool="Ollama"] [data-testid="found-folder-added"]').waitFor({ timeout: 15_000 });
  assert.equal(await find.locator('[data-testid="found-folder-add"]').count(), 0);
  await page.screenshot({ path: join(artifacts, "library-ollama-added.png"), fullPage: true });
});

test("a folder typed by its path: a missing one gets one line, a real one is added", async () => {
  const find = page.locator('[data-testid="find-on-machine"]');
  await find.locator('[data-testid="folder-path"]').fill(join(dir, "nowhere"));
  await find.locator('[data-testid="folder-add"]').click();
  const error = find.locator('[data-testid="folder-add-error"]');
  await error.waitFor({ timeout: 15_000 });
  assert.match(await error.innerText(), /^folder '.*nowhere' cannot be opened \(.*\): check the path/);

  const mine = join(dir, "my-models");
  mkdirSync(mine);
  copyFileSync(tinyModel, join(mine, "Tiny-Llama-Q4_K_M.gguf"));
  await find.locator('[data-testid="folder-path"]').fill(mine);
  await find.locator('[data-testid="folder-add"]').click();
  await page.locator(`[data-testid="model-row"][data-path="${join(mine, "Tiny-Llama-Q4_K_M.gguf")}"]`).waitFor({ timeout: 15_000 });
  assert.equal(await error.count(), 0);
  assert.equal(await find.locator('[data-testid="folder-path"]').inputValue(), "");
  assert.equal(await page.locator('[data-testid="model-row"]').count(), 3);
});

test("Plan on an Ollama tag opens the placement editor on its blob", async () => {
  await page.locator('[data-testid="nav-models"]').click();
  const tiny = page.locator('[data-testid="model-row"]', { has: page.locator('[data-testid="model-name"]', { hasText: /^tiny:q4$/ }) });
  await tiny.locator('[data-testid="plan-model"]').click();
  await page.locator('[data-testid="plan-page"]').waitFor();
  assert.equal(new URL(page.url().replace("#/plan?", "x:/?")).searchParams.get("model"), blob);
  await page.locator('[data-testid="device-column"]').first().waitFor({ timeout: 20_000 });
  await page.locator('[data-testid="plan-verdict"]').waitFor();
  assert.equal((await page.locator('[data-testid="plan-verdict"]').textContent()).trim(), "fits");
  assert.match(await page.locator('[data-testid="plan-model-facts"]').textContent(), /4 layers/);
  assert.ok((await page.locator('[data-testid="command-line"]').textContent()).includes(blob), "llama-server gets the blob with -m");
});
