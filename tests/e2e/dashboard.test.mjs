// The dashboard in a real browser against a real daemon playing the 4× RTX 3090 rig
// (one card on an x1 riser): cards, the flagged link, live charts, and the security checks; the
// Work panel on top: the next step on an empty rig, then a real CPU llama-server running a tiny
// GGUF shown with its gateway names, state and memory, the speed of its last reply once one
// came back through the gateway, and its Chat link opening the chat with it.
// Needs RIGDECK_LLAMA_SERVER (a built llama-server) and RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { appendFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");

let daemon;
let browser;
let page;
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

const api = (method, path, body) => adminRequest(daemon, method, path, body);

before(async () => {
  // An empty rig: the library scans Rigdeck's own empty models folder only, not the caches of
  // other tools on this machine.
  daemon = await startDaemon("4x3090.json", {
    prepare: ({ configDir, dataDir }) =>
      appendFileSync(join(configDir, "settings.toml"), `model_folders = [${JSON.stringify(join(dataDir, "models"))}]\n`),
  });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  if (daemon) {
    const list = await api("GET", "/api/v1/instances").catch(() => null);
    for (const v of list?.body ?? []) {
      if (["starting", "loading", "ready"].includes(v.phase)) await api("POST", `/api/v1/instances/${v.name}/stop`).catch(() => {});
    }
  }
  await browser?.close();
  await daemon?.stop();
});

test("on an empty rig the Work panel says to find a model that fits", async () => {
  const next = page.locator('[data-testid="rig-work"] [data-testid="work-next"]');
  await next.waitFor({ timeout: 10_000 });
  assert.equal(await next.getAttribute("data-kind"), "find");
  assert.match(await next.textContent(), /Find a model that fits this rig/);
  assert.equal(await next.locator("a").getAttribute("href"), "#/welcome");
  assert.equal(await page.locator('[data-testid="work-model"]').count(), 0);
  assert.equal(await page.locator('[data-testid="work-download"]').count(), 0);
});

test("the sign-in link leaves the token out of the address bar", async () => {
  assert.equal(new URL(page.url()).searchParams.get("token"), null);
});

test("shows four GPU cards with the right names", async () => {
  const names = await page.locator('[data-testid="gpu-card"] [data-testid="gpu-name"]').allTextContents();
  assert.deepEqual(names.map((n) => n.trim()), [
    "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 3090",
  ]);
});

test("flags the card on the x1 link and only that one", async () => {
  const card = page.locator('[data-testid="gpu-card"][data-gpu-index="3"]');
  const badge = card.locator('[data-testid="pcie-badge"]');
  assert.equal(await badge.getAttribute("data-degraded"), "true");
  assert.match(await badge.textContent(), /Gen4 x1 \(max x16\)/);
  const full = page.locator('[data-testid="gpu-card"][data-gpu-index="0"] [data-testid="pcie-badge"]');
  assert.match(await full.textContent(), /Gen4 x16/);
  assert.notEqual(await full.getAttribute("data-degraded"), "true");
  // The x1 warning is shown once, on its card; the findings panel counts it and says where it is.
  const warning = page.locator('[data-rule="pcie_narrow"][data-severity="warning"]');
  assert.equal(await warning.count(), 1, "the x1 warning is shown once");
  assert.equal(await card.locator('[data-testid="gpu-finding"][data-rule="pcie_narrow"]').count(), 1);
  assert.match(await warning.first().textContent(), /x1/);
  assert.match(await page.locator('[data-testid="findings-on-cards"]').textContent(), /on (its|their) cards? below/);
});

test("charts receive live points over the WebSocket", async () => {
  const chart = page.locator('[data-testid="gpu-card"][data-gpu-index="0"] [data-testid="chart-utilization"]');
  const points = async () => Number(await chart.getAttribute("data-points"));
  const first = await points();
  await page.waitForFunction(
    (before) => {
      const el = document.querySelector('[data-testid="gpu-card"][data-gpu-index="0"] [data-testid="chart-utilization"]');
      return Number(el?.getAttribute("data-points")) >= before + 2;
    },
    first,
    { timeout: 10_000 },
  );
  assert.ok((await points()) >= first + 2);
  mkdirSync(artifacts, { recursive: true });
  const shot = join(artifacts, "dashboard.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`dashboard screenshot saved to ${shot}`);
});

test("a request without the token gets 401", async () => {
  const response = await fetch(`${daemon.base}/api/v1/telemetry/latest`);
  assert.equal(response.status, 401);
  const body = await response.json();
  assert.equal(body.code, "unauthorized");
});

test("a foreign Origin is refused, for the API and the WebSocket", async () => {
  const api = await fetch(`${daemon.base}/api/v1/status`, {
    headers: { authorization: `Bearer ${daemon.token}`, origin: "http://evil.example" },
  });
  assert.equal(api.status, 403);
  // A page on another origin cannot open our WebSocket, even with the cookie in the browser.
  const evil = await browser.newPage();
  await evil.route("http://evil.example/", (route) => route.fulfill({ contentType: "text/html", body: "<p>evil</p>" }));
  await evil.goto("http://evil.example/");
  const outcome = await evil.evaluate(
    (wsUrl) =>
      new Promise((done) => {
        const ws = new WebSocket(wsUrl);
        ws.onopen = () => done("open");
        ws.onerror = () => done("refused");
      }),
    `${daemon.base.replace("http", "ws")}/api/v1/events`,
  );
  assert.equal(outcome, "refused");
  await evil.close();
});

test("each menu link leads to a page headed and titled as the link", async () => {
  for (const route of ["history", "models", "instances", "gateway", "settings"]) {
    const link = page.locator(`[data-testid="nav-${route}"]`);
    const label = (await link.textContent()).trim();
    await link.click();
    await page.waitForFunction((l) => document.querySelector("main h2")?.textContent.trim() === l, label, { timeout: 10_000 });
    assert.equal(await page.title(), `${label} · Rigdeck`, `the ${route} page's title`);
  }
  await page.locator('[data-testid="nav-dashboard"]').click();
  await page.locator('[data-testid="gpu-card"]').first().waitFor();
});

test("a running model and the speed of its last reply appear on the dashboard", async () => {
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: { ...process.env, RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"), RIGDECK_DATA_DIR: daemon.dataDir, RUST_LOG: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const build = (await api("GET", "/api/v1/engines")).body[0];
  const created = await api("POST", "/api/v1/profiles", {
    name: "tiny",
    engine_build_id: build.id,
    model: tinyModel,
    placement: { context: 4096, threads: 2 },
    gateway: { aliases: ["tiny-chat"] },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  // A model on disk, none running: the next step is to run one.
  const next = page.locator('[data-testid="work-next"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="work-next"]')?.getAttribute("data-kind") === "run", null, { timeout: 10_000 });
  assert.equal(await next.locator("a").getAttribute("href"), "#/models");

  const started = await api("POST", "/api/v1/profiles/tiny/start", {});
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const row = page.locator('[data-testid="work-model"][data-name="tiny"]');
  await page.waitForFunction(
    () => document.querySelector('[data-testid="work-model"][data-name="tiny"]')?.getAttribute("data-state") === "ready",
    null,
    { timeout: 120_000 },
  );
  assert.equal(await next.count(), 0, "no next step while a model runs");
  assert.equal((await row.locator('[data-testid="work-model-state"]').textContent()).trim(), "ready");
  assert.match(await row.locator('[data-testid="work-model-aliases"]').textContent(), /tiny-chat/);
  assert.match(await row.locator('[data-testid="work-model-speed"]').textContent(), /no reply yet/);
  assert.equal(await row.locator('[data-testid="work-model-engine"]').getAttribute("href"), "#/instances");
  assert.match(await row.locator('[data-testid="work-model-memory"]').textContent(), /GPU \d+:|no GPU memory/);

  // A reply through the gateway, by its alias: its decode speed is shown on the dashboard.
  const reply = await fetch(`${daemon.base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${daemon.token}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny-chat", messages: [{ role: "user", content: "Hello" }], max_tokens: 24 }),
  });
  const replied = await reply.text();
  assert.equal(reply.status, 200, replied);
  assert.ok(JSON.parse(replied).usage?.completion_tokens > 0, replied);
  const gateway = await api("GET", "/api/v1/gateway");
  const last = gateway.body.models.find((m) => m.name === "tiny")?.last_reply;
  assert.ok(last && last.decode_tps > 0, `the gateway keeps the last reply: ${JSON.stringify(gateway.body.models)}`);
  const speed = row.locator('[data-testid="work-model-speed"]');
  await page.waitForFunction(
    () => /tok\/s last reply/.test(document.querySelector('[data-testid="work-model"][data-name="tiny"] [data-testid="work-model-speed"]')?.textContent ?? ""),
    null,
    { timeout: 10_000 },
  );
  const shown = Number((await speed.textContent()).match(/([\d.]+) tok\/s/)[1]);
  assert.ok(Math.abs(shown - last.decode_tps) <= 0.5, `shown ${shown} tok/s, the gateway says ${last.decode_tps}`);
  mkdirSync(artifacts, { recursive: true });
  await page.locator('[data-testid="rig-work"]').screenshot({ path: join(artifacts, "dashboard-work.png") });

  // Chat opens the chat with it chosen.
  await row.locator('[data-testid="work-model-chat"]').click();
  await page.locator('[data-testid="chat-page"]').waitFor({ timeout: 15_000 });
  assert.equal(new URL(page.url()).hash, "#/chat");
  await page.waitForFunction(() => document.querySelector('[data-testid="model-select"]')?.value === "tiny", null, { timeout: 15_000 });
  await page.locator('[data-testid="nav-dashboard"]').click();
  await row.waitFor();
});
