// Pairing from the Settings page in a real browser, between two real daemons: the rig (with a
// fleet listener) makes a join code on its Settings page, the desk (without one) pastes it into
// its own; both then list each other, a reused code is refused with the daemon's own message, and
// a peer removed on the rig is refused when the desk checks it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { adminRequest, startDaemon, launchChromium } from "./daemon.mjs";

let desk;
let rig;
let browser;
let deskPage;
let rigPage;
let code;

/** A free loopback port for the rig's fleet listener. */
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

/** A daemon whose fleet name is `name`, with the fleet listener `fleetBind` when given. */
function member(name, rigFile, fleetBind) {
  return startDaemon(rigFile, {
    args: fleetBind ? ["--fleet-bind", fleetBind] : [],
    prepare: ({ configDir }) => {
      mkdirSync(join(configDir, "fleet"), { recursive: true });
      writeFileSync(join(configDir, "fleet", "name"), `${name}\n`);
    },
  });
}

/** A page signed in to `daemon`, on its Settings page (each in its own browser context: both
 *  daemons are on 127.0.0.1, and cookies do not tell ports apart). */
async function settingsPage(daemon) {
  const context = await browser.newContext({ viewport: { width: 1300, height: 1000 } });
  const page = await context.newPage();
  await page.goto(daemon.loginUrl);
  await page.locator('[data-testid="gpu-card"]').first().waitFor({ timeout: 15_000 });
  await page.goto(`${daemon.base}/#/settings`);
  await page.locator('[data-testid="fleet-identity"] [data-testid="fleet-name"]').waitFor({ timeout: 15_000 });
  return page;
}

const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

const peerRow = (page, name) => page.locator(`[data-testid="fleet-peer"][data-name="${name}"]`);

before(async () => {
  const rigListener = `127.0.0.1:${await freePort()}`;
  [desk, rig] = await Promise.all([member("desk", "4x3090.json", null), member("tower", "2x5060ti.json", rigListener)]);
  browser = await launchChromium();
  [rigPage, deskPage] = await Promise.all([settingsPage(rig), settingsPage(desk)]);
});

after(async () => {
  await browser?.close();
  await Promise.all([desk?.stop(), rig?.stop()]);
});

test("each Settings page shows its daemon's name, fingerprint and listener, and says how to turn an absent one on", async () => {
  const rigIdentity = (await adminRequest(rig, "GET", "/api/v1/fleet")).body;
  assert.equal(await rigPage.locator('[data-testid="fleet-name"]').textContent(), "tower");
  assert.equal(await rigPage.locator('[data-testid="fleet-fingerprint"]').textContent(), rigIdentity.fingerprint);
  assert.match(await rigPage.locator('[data-testid="fleet-listener"]').textContent(), new RegExp(`on at ${rigIdentity.listen}`));
  const deskListener = await deskPage.locator('[data-testid="fleet-listener"]').textContent();
  assert.match(deskListener, /off.*rigdeck serve --fleet-bind 127\.0\.0\.1:7879/s);
  assert.equal(await deskPage.locator('[data-testid="fleet-no-peers"]').count(), 1);
});

test("a daemon without a listener refuses to invite, in the daemon's words", async () => {
  await deskPage.locator('[data-testid="fleet-invite"]').click();
  const error = deskPage.locator('[data-testid="fleet-invite-error"]');
  await error.waitFor();
  const fromApi = await adminRequest(desk, "POST", "/api/v1/fleet/invites", {});
  assert.equal(fromApi.status, 503);
  assert.equal(await error.textContent(), fromApi.body.message);
  assert.match(fromApi.body.message, /fleet listener is off/);
});

test("the rig's Settings page makes a one-time code with its countdown and the desk's command", async () => {
  await rigPage.locator('[data-testid="fleet-invite-ttl"]').selectOption("600");
  await rigPage.locator('[data-testid="fleet-invite"]').click();
  const codeBox = rigPage.locator('[data-testid="fleet-invite-code"]');
  await codeBox.waitFor();
  code = (await codeBox.textContent()).trim();
  assert.match(code, /^rdk1-[a-z2-7]{110,}$/i);
  assert.equal(await rigPage.locator('[data-testid="fleet-invite-command"]').textContent(), `rigdeck fleet join ${code}`);
  const expiry = rigPage.locator('[data-testid="fleet-invite-expiry"]');
  const first = await expiry.textContent();
  assert.match(first, /^expires in (9|10) min \d+ s$/);
  await rigPage.waitForFunction((before) => document.querySelector('[data-testid="fleet-invite-expiry"]').textContent !== before, first, {
    timeout: 5000,
  });
});

test("the desk's Settings page hints at a bad code before sending, then joins with the rig's code", async () => {
  const box = deskPage.locator('[data-testid="fleet-join-code"]');
  const joinButton = deskPage.locator('[data-testid="fleet-join"]');
  await box.fill("tower-please");
  assert.match(await deskPage.locator('[data-testid="fleet-join-hint"]').textContent(), /starts with “rdk1-”/);
  assert.equal(await joinButton.isDisabled(), true);
  await box.fill(code);
  assert.equal(await deskPage.locator('[data-testid="fleet-join-hint"]').count(), 0);
  await joinButton.click();
  const joined = deskPage.locator('[data-testid="fleet-joined"]');
  await joined.waitFor({ timeout: 15_000 });
  const rigIdentity = (await adminRequest(rig, "GET", "/api/v1/fleet")).body;
  assert.match(await joined.textContent(), /Paired with the rig tower/);
  assert.ok((await joined.textContent()).includes(rigIdentity.fingerprint));
});

test("both daemons list each other, with roles, addresses and shortened fingerprints", async () => {
  const tower = peerRow(deskPage, "tower");
  await tower.waitFor({ timeout: 15_000 });
  assert.equal(await tower.getAttribute("data-role"), "rig");
  const rigIdentity = (await adminRequest(rig, "GET", "/api/v1/fleet")).body;
  assert.match(await tower.textContent(), new RegExp(rigIdentity.listen.replace(/\./g, "\\.")));
  const shown = tower.locator("td").nth(3);
  assert.equal(await shown.getAttribute("title"), rigIdentity.fingerprint);
  assert.ok(rigIdentity.fingerprint.startsWith((await shown.textContent()).split("…")[0]));
  assert.equal((await tower.locator('[data-testid="fleet-peer-answering"]').textContent()).trim(), "answers");

  await rigPage.reload();
  const deskRow = peerRow(rigPage, "desk");
  await deskRow.waitFor({ timeout: 15_000 });
  assert.equal(await deskRow.getAttribute("data-role"), "desk");
  const deskIdentity = (await adminRequest(desk, "GET", "/api/v1/fleet")).body;
  assert.equal(await deskRow.locator("td").nth(3).getAttribute("title"), deskIdentity.fingerprint);
  // The desk joined without a listener: the rig cannot call it, and says so rather than "silent".
  assert.equal((await deskRow.locator('[data-testid="fleet-peer-answering"]').textContent()).trim(), "not callable");

  await tower.locator('[data-testid="fleet-peer-check"]').click();
  const result = deskPage.locator('[data-testid="fleet-peer-check-result"][data-name="tower"]');
  await result.waitFor({ timeout: 15_000 });
  assert.match(await result.textContent(), /answers: tower, Rigdeck /);
  mkdirSync(artifacts, { recursive: true });
  await deskPage.locator('[data-testid="settings-fleet"]').screenshot({ path: join(artifacts, "settings-fleet-desk.png") });
  await rigPage.locator('[data-testid="settings-fleet"]').screenshot({ path: join(artifacts, "settings-fleet-rig.png") });
});

test("a reused code is refused with the daemon's message, as it is", async () => {
  await deskPage.locator('[data-testid="fleet-join-code"]').fill(code);
  await deskPage.locator('[data-testid="fleet-join"]').click();
  const error = deskPage.locator('[data-testid="fleet-join-error"]');
  await error.waitFor({ timeout: 15_000 });
  const fromApi = await adminRequest(desk, "POST", "/api/v1/fleet/join", { code });
  assert.equal(fromApi.status, 409, JSON.stringify(fromApi.body));
  assert.equal(await error.textContent(), fromApi.body.message);
});

test("removing the desk on the rig asks first, and the desk's check is refused from then on", async () => {
  const deskRow = peerRow(rigPage, "desk");
  await deskRow.locator('[data-testid="fleet-peer-remove"]').click();
  const confirm = rigPage.locator('[data-testid="fleet-peer-confirm"]');
  assert.match(await confirm.textContent(), /desk “desk”.*refuses it/s);
  await confirm.locator('[data-testid="fleet-peer-remove-confirm"]').click();
  await rigPage.locator('[data-testid="fleet-removed"]').waitFor();
  await rigPage.locator('[data-testid="fleet-no-peers"]').waitFor({ timeout: 15_000 });
  assert.equal((await adminRequest(rig, "GET", "/api/v1/fleet/peers")).body.length, 0);

  await peerRow(deskPage, "tower").locator('[data-testid="fleet-peer-check"]').click();
  const result = deskPage.locator('[data-testid="fleet-peer-check-result"][data-name="tower"]');
  await deskPage.waitForFunction(() => /no longer knows/.test(document.querySelector('[data-testid="fleet-peer-check-result"][data-name="tower"]')?.textContent ?? ""), null, {
    timeout: 15_000,
  });
  assert.match(await result.textContent(), /the rig 'tower' no longer knows this desk: pair again/);
});
