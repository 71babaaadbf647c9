// The host's memory bandwidth on the Settings page of a real daemon in a real browser: the first
// start measures it in the background and the page shows it with how it was measured; "Measure
// again" takes a new reading; a typed value wins over the measurement (the page says so, and the
// planner's CPU device gets it) until "Use the measurement" goes back.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { startDaemon, launchChromium, adminRequest } from "./daemon.mjs";

const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;

before(async () => {
  daemon = await startDaemon("2x5060ti.json");
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
  await page.locator('[data-testid="nav-settings"]').click();
});

after(async () => {
  await browser?.close();
  await daemon?.stop();
});

const panel = () => page.locator('[data-testid="memory-bandwidth"]');
const inUse = () => panel().locator('[data-testid="memory-bandwidth-in-use"]');

test("the first start's measurement is shown with how it was taken", async () => {
  await page.waitForFunction(
    () => document.querySelector('[data-testid="memory-bandwidth-in-use"]')?.dataset.source === "measured",
    null,
    { timeout: 30_000 },
  );
  assert.match(await inUse().innerText(), /^In use: \d+\.\d GB\/s \(measured by Rigdeck\)$/);
  const measured = await panel().locator('[data-testid="memory-bandwidth-measured"]').innerText();
  assert.match(measured, /^Measured: \d+\.\d GB\/s — \d+\.\d (MiB|GiB) read by \d+ threads?, (best of \d passes|one pass) \(\d+\.\d s\), .+$/);
  mkdirSync(artifacts, { recursive: true });
  await panel().screenshot({ path: join(artifacts, "settings-memory-bandwidth.png") });
});

test("Measure again takes a new reading", async () => {
  const { body: before } = await adminRequest(daemon, "GET", "/api/v1/host/memory-bandwidth");
  const button = panel().locator('[data-testid="memory-bandwidth-measure"]');
  assert.equal((await button.innerText()).trim(), "Measure again");
  await button.click();
  let after = before;
  for (let i = 0; i < 300 && after.measured.measured_at_ms === before.measured.measured_at_ms; i++) {
    await new Promise((r) => setTimeout(r, 100));
    ({ body: after } = await adminRequest(daemon, "GET", "/api/v1/host/memory-bandwidth"));
  }
  assert.ok(after.measured.measured_at_ms > before.measured.measured_at_ms, "a new reading");
  // The page has it once the answer came: the button is back.
  await page.waitForFunction(
    () => {
      const b = document.querySelector('[data-testid="memory-bandwidth-measure"]');
      return b?.textContent.trim() === "Measure again" && !b.disabled;
    },
    null,
    { timeout: 30_000 },
  );
});

test("a typed value wins over the measurement until the measurement is chosen again", async () => {
  await panel().locator('[data-testid="memory-bandwidth-input"]').fill("89.6");
  await panel().locator('[data-testid="memory-bandwidth-save"]').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid="memory-bandwidth-in-use"]')?.dataset.source === "settings",
    null,
    { timeout: 10_000 },
  );
  assert.equal(await inUse().innerText(), "In use: 89.6 GB/s (your value, which wins over the measurement)");
  const { body: status } = await adminRequest(daemon, "GET", "/api/v1/host/memory-bandwidth");
  assert.equal(status.in_use_bytes_per_s, 89_600_000_000);

  await panel().locator('[data-testid="memory-bandwidth-use-measured"]').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid="memory-bandwidth-in-use"]')?.dataset.source === "measured",
    null,
    { timeout: 10_000 },
  );
  assert.equal(await panel().locator('[data-testid="memory-bandwidth-use-measured"]').count(), 0);
});
