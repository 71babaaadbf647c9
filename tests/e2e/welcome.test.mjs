// The first run as a newcomer clicks it: a fresh daemon opens on the first-run page, which says
// what it found (the GPUs with their links, the engine); "Recommended for this rig" lists the
// catalog's models planned on this rig from a stand-in hub's headers; one click on Run downloads
// the real Gemma 3 270M (written by another tool, no chat template), places it, saves a profile,
// starts it and opens the chat with it chosen; typing and Send is the second click, and the reply
// streams. The clicks and seconds are counted and written to the artifacts (the README's figure).
// Then the hub goes away: the page says so in one line and the model on disk still runs in one
// click.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";
import { startFakeHub } from "./fake_hub.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const gemma = requiredFile("RIGDECK_GEMMA_MODEL", "the real Gemma 3 270M (tests/fixtures/gemma3_270m.sh)");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";
const REPO = "rigdeck-test/gemma-3-270m-it-GGUF";
const FILE = "gemma-3-270m-it-Q4_K_M.gguf";

let dir;
let hub;
let daemon;
let browser;
let page;
let clicks = 0;

const api = (method, path, body) => adminRequest(daemon, method, path, body);

async function until(what, fn, arg, timeout = 20_000) {
  try {
    await page.waitForFunction(fn, arg, { timeout });
  } catch (e) {
    throw new Error(`timed out waiting for ${what}: ${e.message.split("\n")[0]}`);
  }
}

/** A click a newcomer makes (counted for the figure). */
async function click(selector) {
  clicks += 1;
  await page.locator(selector).first().click();
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rigdeck-welcome-"));
  const spec = { repos: [{ id: REPO, files: [{ path: FILE, source: gemma }, { path: "README.md", size: 200, lfs: false }] }] };
  writeFileSync(join(dir, "spec.json"), JSON.stringify(spec));
  hub = await startFakeHub(join(dir, "spec.json"));
  // The catalog the recommendations are chosen from: one model the stand-in hub serves, one it
  // does not (left out, with its reason).
  const catalog = {
    about: "Test catalog.",
    models: [
      { repo: REPO, quant: "Q4_K_M", kind: "dense", params: "270M", approx_gb: 0.25, why: "The smallest Gemma 3." },
      { repo: "rigdeck-test/Missing-GGUF", quant: "Q4_K_M", kind: "dense", params: "8B", approx_gb: 5, why: "Not on this hub." },
    ],
  };
  writeFileSync(join(dir, "catalog.json"), JSON.stringify(catalog));
  const hfHome = join(dir, "hf");
  mkdirSync(hfHome, { recursive: true });
  daemon = await startDaemon("2x5060ti.json", {
    firstRun: true,
    env: {
      HF_ENDPOINT: hub.url,
      HF_HUB_CACHE: join(hfHome, "hub"),
      HF_HOME: hfHome,
      HF_TOKEN: "",
      LLAMA_CACHE: join(dir, "llama.cpp"),
      HOME: dir,
      RIGDECK_STARTER_CATALOG: join(dir, "catalog.json"),
    },
  });
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: { ...process.env, RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"), RIGDECK_DATA_DIR: daemon.dataDir, RUST_LOG: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("pageerror", (e) => console.error("page error:", e.message));
});

after(async () => {
  await browser?.close();
  hub?.child.kill();
  await daemon?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("from the first-run page to a streamed reply: Run, then Send", { timeout: 300_000 }, async () => {
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="welcome-page"]').waitFor({ timeout: 20_000 });
  assert.match(page.url(), /#\/welcome$/, "a fresh daemon opens on the first-run page");
  await until("the GPUs found", () => document.querySelectorAll('[data-testid="welcome-gpu"]').length === 2);
  assert.match(await page.locator('[data-testid="welcome-gpu"]').first().innerText(), /RTX 5060 Ti.*PCIe 5\.0 x8/);
  await until("the engine found", () => /Engine: llama\.cpp/.test(document.querySelector('[data-testid="welcome-engines"]')?.textContent ?? ""));
  // GPUs, and only a CPU build to run on: said before the first Run.
  await page.locator('[data-testid="welcome-cpu-build"]').waitFor({ timeout: 10_000 });

  const card = page.locator(`[data-testid="recommended-model"][data-repo="${REPO}"]`);
  await card.waitFor({ timeout: 60_000 });
  assert.equal(await page.locator('[data-testid="recommended-model"][data-repo="rigdeck-test/Missing-GGUF"]').count(), 0, "a model the hub lacks is not offered");

  const started = Date.now();
  const steps = {};
  await page.exposeFunction("__step", (step) => {
    if (!(step in steps)) steps[step] = Date.now() - started;
  });
  await page.evaluate(() => {
    const seen = () => {
      const step = document.querySelector('[data-testid="run-strip"]')?.getAttribute("data-step");
      if (step) window.__step(step);
    };
    new MutationObserver(seen).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-step"] });
  });
  clicks += 1;
  await card.locator('[data-testid="recommended-run"]').click();

  // The chat opens by itself with the model chosen.
  await page.waitForFunction(() => location.hash.startsWith("#/chat"), null, { timeout: 180_000 });
  const ready = Date.now() - started;
  await until("the model chosen", () => document.querySelector('[data-testid="model-select"]')?.value === "gemma-3-270m-it-q4_k_m", null, 30_000);
  assert.equal(await page.locator('[data-testid="run-strip"]').getAttribute("data-step"), "ready");

  await page.locator('[data-testid="composer-text"]').fill("Say hello in one short sentence.");
  const sent = Date.now();
  await click('[data-testid="composer-send"]');
  await until(
    "the first streamed text",
    () => {
      const all = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
      const last = all[all.length - 1];
      return Number(last?.querySelector('[data-testid="message-content"]')?.getAttribute("data-source-length") ?? 0) > 0;
    },
    null,
    120_000,
  );
  const firstToken = Date.now() - sent;
  await page.locator('[data-testid="composer-stop"]').click({ timeout: 5_000 }).catch(() => {});
  const text = await page.locator('[data-testid="chat-message"][data-role="assistant"]').last().innerText();
  assert.doesNotMatch(text, /<end_of_turn>|<\|im_end\|>/, "the architecture's template is used");

  const figures = {
    clicks,
    download_s: ((steps.planning ?? steps.starting ?? ready) - (steps.downloading ?? 0)) / 1000,
    load_s: (ready - (steps.planning ?? steps.starting ?? 0)) / 1000,
    run_to_chat_s: ready / 1000,
    send_to_first_token_s: firstToken / 1000,
    steps_ms: steps,
  };
  mkdirSync(artifacts, { recursive: true });
  writeFileSync(join(artifacts, "first-run.json"), JSON.stringify(figures, null, 1));
  console.log("first run:", JSON.stringify(figures));
  assert.ok(clicks <= 3, `${clicks} clicks from the first-run page to a reply`);

  const profiles = (await api("GET", "/api/v1/profiles")).body;
  assert.deepEqual(profiles.map((p) => p.name), ["gemma-3-270m-it-q4_k_m"]);
  assert.equal(profiles[0].chat_template, "gemma");
});

test("offline: the page says so in one line and the model on disk runs in one click", { timeout: 120_000 }, async () => {
  hub.child.kill();
  await api("POST", "/api/v1/instances/gemma-3-270m-it-q4_k_m/stop");
  await page.goto(`${daemon.loginUrl.split("/login")[0]}/#/welcome`);
  await page.locator('[data-testid="welcome-page"]').waitFor({ timeout: 20_000 });
  await until(
    "the offline line",
    () => /offline|cannot be reached|could not reach/i.test(document.querySelector('[data-testid="welcome-recommended"]')?.textContent ?? ""),
    null,
    60_000,
  );
  const local = page.locator('[data-testid="local-model"]').first();
  await local.waitFor({ timeout: 20_000 });
  await local.locator('[data-testid="local-run"]').click();
  await page.waitForFunction(() => location.hash.startsWith("#/chat"), null, { timeout: 120_000 });
  await until("the model chosen", () => document.querySelector('[data-testid="model-select"]')?.value === "gemma-3-270m-it-q4_k_m", null, 30_000);
  assert.equal((await api("GET", "/api/v1/profiles")).body.length, 1, "the same profile, not a second");
});
