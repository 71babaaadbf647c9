// The Fleet page in a real browser: a desk paired with two real rigs (each its own `rigdeck
// serve` with its own NVML double rig and a fleet listener), a card per daemon with its GPUs;
// one rig killed mid-test turns grey with the way it fails and since when, never live; a rig's
// card opens its dashboard through the desk's relay, with a banner and the way back, and the
// rig's own events (a model folder added there) reach that page live through the desk.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { adminRequest, startDaemon, launchChromium } from "./daemon.mjs";

let desk;
let tower;
let mini;
let browser;
let page;

/** A free loopback port for a fleet listener. */
function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** A daemon named `name` (its fleet name), playing `rig`, with a fleet listener when asked. */
async function member(name, rig, listens) {
  const args = listens ? ["--fleet-bind", `127.0.0.1:${await freePort()}`] : [];
  return startDaemon(rig, {
    args,
    prepare: ({ configDir }) => {
      mkdirSync(join(configDir, "fleet"), { recursive: true });
      writeFileSync(join(configDir, "fleet", "name"), `${name}\n`);
    },
  });
}

async function pair(rig) {
  const invite = await adminRequest(rig, "POST", "/api/v1/fleet/invites", {});
  assert.equal(invite.status, 201, JSON.stringify(invite.body));
  const joined = await adminRequest(desk, "POST", "/api/v1/fleet/join", { code: invite.body.code });
  assert.equal(joined.status, 200, JSON.stringify(joined.body));
}

const card = (name) => page.locator(`[data-testid="fleet-card"][data-name="${name}"]`);

before(async () => {
  [desk, tower, mini] = await Promise.all([
    member("desk", "4x3090.json", false),
    member("tower", "2x5060ti.json", true),
    member("mini", "2xgh200.json", true),
  ]);
  await pair(tower);
  await pair(mini);
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(desk.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
});

after(async () => {
  await browser?.close();
  await Promise.all([desk?.stop(), tower?.stop(), mini?.stop()]);
});

test("the menu shows Fleet once a rig is paired, and the page a live card per daemon with its GPUs", async () => {
  await page.locator('[data-testid="nav-fleet"]').click();
  for (const name of ["desk", "tower", "mini"]) {
    await card(name).locator('[data-testid="fleet-state"]', { hasText: "live" }).waitFor({ timeout: 15_000 });
  }
  await card("tower").locator('[data-testid="fleet-gpu"]').nth(1).waitFor();
  assert.equal(await card("tower").locator('[data-testid="fleet-gpu"]').count(), 2);
  assert.match(await card("tower").textContent(), /RTX 5060 Ti/);
  assert.match(await card("mini").textContent(), /GH200/);
});

test("a rig killed mid-test turns grey with the way it fails and since when, never live", async () => {
  await mini.kill();
  const dead = page.locator('[data-testid="fleet-card"][data-name="mini"][data-state="unreachable"]');
  await dead.waitFor({ timeout: 10_000 });
  // A request in flight as the rig died says the connection broke; the next one, refused.
  const refused = /the desk cannot reach the rig: .*connection refused/;
  await dead.locator('[data-testid="fleet-why"]', { hasText: refused }).waitFor({ timeout: 10_000 });
  assert.match(await dead.locator('[data-testid="fleet-since"]').textContent(), /since /);
  assert.match(await dead.locator('[data-testid="fleet-stale"]').textContent(), /Last known state.*not live/);
  assert.equal(await dead.locator('[data-testid="fleet-state"]').textContent(), "unreachable");
  assert.equal(await dead.evaluate((el) => getComputedStyle(el).filter), "grayscale(1)");
  // It stays that way: a second later it is still not shown as live.
  await page.waitForTimeout(1500);
  assert.equal(await card("mini").getAttribute("data-state"), "unreachable");
  assert.equal(await card("tower").getAttribute("data-state"), "live");
});

test("a rig's card opens its dashboard through the desk, with a banner and the way back", async () => {
  await card("tower").locator('[data-testid="fleet-open-dashboard"]').click();
  const banner = page.locator('[data-testid="fleet-viewing"]');
  await banner.waitFor({ timeout: 15_000 });
  assert.match(await banner.textContent(), /Viewing rig tower/);
  await page.locator('[data-testid="gpu-name"]', { hasText: "RTX 5060 Ti" }).first().waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('[data-testid="gpu-card"]').count(), 2);
  // The rig's events reach the page live, through the desk: a model folder added on the rig
  // shows on its Models page without a reload.
  await page.locator('[data-testid="nav-models"]').click();
  const rigModels = mkdtempSync(join(tmpdir(), "rigdeck-tower-models-"));
  copyFileSync(process.env.RIGDECK_TINY_MODEL, join(rigModels, "tower-tiny.gguf"));
  const added = await adminRequest(tower, "POST", "/api/v1/models/folders", { path: rigModels });
  assert.ok(added.status < 300, JSON.stringify(added.body));
  await page.locator('[data-testid="model-row"]', { hasText: "tower-tiny" }).waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('[data-testid="fleet-viewing"]').count(), 1);
  await page.locator('[data-testid="fleet-back"]').click();
  await page.locator('[data-testid="fleet-page"]').waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('[data-testid="fleet-viewing"]').count(), 0);
  await page.locator('[data-testid="nav-dashboard"]').click();
  await page.locator('[data-testid="gpu-name"]', { hasText: "RTX 3090" }).first().waitFor({ timeout: 15_000 });
});
