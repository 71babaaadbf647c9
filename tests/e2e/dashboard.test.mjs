// The dashboard in a real browser against a real daemon playing the 4× RTX 3090 rig
// (one card on an x1 riser): cards, the flagged link, live charts, and the security checks.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { startDaemon, launchChromium } from "./daemon.mjs";

let daemon;
let browser;
let page;
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

before(async () => {
  daemon = await startDaemon("4x3090.json");
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  await browser?.close();
  await daemon?.stop();
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
