// The Gateway page in a real browser against a real daemon playing the 2× RTX 5060 Ti rig: a CPU
// llama-server registered with the CLI and an on-demand launch profile (context 8192, alias
// "tiny-alias") for a tiny GGUF. The page shows the endpoint and the model, stopped; an API key is
// created on the page and its secret read from it (shown once); a chat completion sent from Node
// with that secret and the alias loads the model on demand, which the page then shows ready; the
// Usage tab counts the request, per key and in the recent requests with its tokens; the key is
// revoked on the page and the same request is then refused with 401 in OpenAI's shape.
// Needs RIGDECK_LLAMA_SERVER (a built llama-server) and RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;
/** What the tests learn on the way: the endpoint shown, the key created and its secret, the
 *  request's answer. */
let endpointUrl;
let keyId;
let secret;
let completion;

const api = (method, path, body) => adminRequest(daemon, method, path, body);

/** Waits until `check(answer body)` holds for GET `path` (admin token); says what it saw if not. */
async function until(path, check, what, timeoutMs = 30_000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    last = await api("GET", path);
    if (last.status === 200 && check(last.body)) return last.body;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms; GET ${path} answered ${last?.status}:\n${JSON.stringify(last?.body, null, 1).slice(0, 3000)}`);
}

/** The request a client would send, from Node (not the page), with the gateway key `key`. */
async function chatCompletion(key) {
  const res = await fetch(`${endpointUrl}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "tiny-alias",
      messages: [{ role: "user", content: "Say hello." }],
      max_tokens: 8,
      stream: false,
    }),
    // Loading the model on demand on two busy cores: generous.
    signal: AbortSignal.timeout(240_000),
  });
  const text = await res.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, headers: res.headers, body };
}

const modelRow = () => page.locator('[data-testid="gateway-model"][data-name="tiny"]');
const keyRow = () => page.locator(`[data-testid="key-row"][data-id="${keyId}"]`);

before(async () => {
  daemon = await startDaemon("2x5060ti.json");
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: { ...process.env, RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"), RIGDECK_DATA_DIR: daemon.dataDir, RUST_LOG: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const builds = await api("GET", "/api/v1/engines");
  assert.equal(builds.status, 200, JSON.stringify(builds.body));
  assert.equal(builds.body.length, 1, JSON.stringify(builds.body));
  const created = await api("POST", "/api/v1/profiles", {
    name: "tiny",
    engine_build_id: builds.body[0].id,
    model: tinyModel,
    placement: { context: 8192 },
    gateway: { on_demand: true, aliases: ["tiny-alias"] },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.deepEqual(created.body.profile.gateway.aliases, ["tiny-alias"], JSON.stringify(created.body));
  assert.equal(created.body.profile.gateway.on_demand, true);
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1500, height: 1000 } });
  page.on("pageerror", (e) => console.log(`page error: ${e.message}`));
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

test("the Gateway page shows the endpoint and the on-demand model with its alias, stopped", async () => {
  await page.locator('[data-testid="nav-gateway"]').click();
  await page.locator('[data-testid="gateway-page"]').waitFor({ timeout: 15_000 });
  assert.equal(await page.evaluate(() => location.hash), "#/gateway");

  const url = page.locator('[data-testid="gateway-base-url"]');
  await url.waitFor({ timeout: 15_000 });
  endpointUrl = (await url.textContent()).trim();
  assert.match(endpointUrl, /^http:\/\/\S+\/v1$/, `the endpoint shown: ${endpointUrl}`);
  const view = await api("GET", "/api/v1/gateway");
  assert.equal(view.status, 200, JSON.stringify(view.body));
  // The page is on the rig itself: the address is the daemon's own, as GET /gateway gives it.
  assert.equal(endpointUrl, view.body.base_url.replace(/\/$/, ""));
  assert.equal(new URL(endpointUrl).port, new URL(daemon.base).port, "on the daemon's port");

  const row = modelRow();
  await row.waitFor({ timeout: 15_000 });
  assert.equal(await row.getAttribute("data-state"), "stopped");
  assert.equal((await row.locator('[data-testid="gateway-model-state"]').textContent()).trim(), "stopped");
  const aliases = await row.locator('[data-testid="gateway-aliases"] .alias').allTextContents();
  assert.deepEqual(aliases.map((a) => a.trim()), ["tiny-alias"]);
  assert.equal((await row.locator('[data-testid="gateway-on-demand"]').textContent()).trim(), "on demand");
  // No key yet.
  await page.locator('[data-testid="keys-empty"]').waitFor({ timeout: 15_000 });
});

test("an API key is created on the page and its secret shown once", async () => {
  await page.locator('[data-testid="key-name"]').fill("e2e");
  const created = page.waitForResponse((r) => r.request().method() === "POST" && /\/api\/v1\/keys$/.test(r.url()));
  await page.locator('[data-testid="key-create"]').click();
  const answer = await created;
  assert.equal(answer.status(), 201, await answer.text());

  const panel = page.locator('[data-testid="key-secret-panel"]');
  await panel.waitFor({ timeout: 15_000 });
  assert.match(await panel.textContent(), /Key “e2e” created\./);
  secret = (await panel.locator('[data-testid="key-secret"]').textContent()).trim();
  assert.match(secret, /^rdk-\S+$/, `the secret shown: ${secret}`);
  keyId = Number(await panel.getAttribute("data-key-id"));
  assert.ok(keyId > 0, `the panel names the key: ${keyId}`);
  // The form is cleared; the key is listed, live, never used; the curl example carries the secret.
  assert.equal(await page.locator('[data-testid="key-name"]').inputValue(), "");
  await keyRow().waitFor({ timeout: 15_000 });
  assert.equal(await keyRow().getAttribute("data-revoked"), "false");
  assert.equal((await keyRow().locator("td.name").textContent()).trim(), "e2e");
  assert.ok(secret.startsWith((await keyRow().locator("td.mono").textContent()).replace(/…$/, "").trim()), "the row shows the secret's prefix");
  assert.ok((await page.locator('[data-testid="gateway-curl"]').textContent()).includes(secret), "the curl example uses the new key");

  // The daemon lists the key but never its secret.
  const keys = await api("GET", "/api/v1/keys");
  assert.equal(keys.status, 200);
  const listed = keys.body.find((k) => k.id === keyId);
  assert.equal(listed?.name, "e2e", JSON.stringify(keys.body));
  assert.equal(listed.revoked_at_ms, null);
  assert.ok(!JSON.stringify(keys.body).includes(secret), "GET /keys does not carry the secret");
});

test("a chat completion with the key and the alias loads the model on demand; the page shows it ready", async () => {
  const before = await api("GET", "/api/v1/instances");
  assert.ok(!(before.body ?? []).some((v) => v.name === "tiny" && ["starting", "loading", "ready"].includes(v.phase)), `not running before: ${JSON.stringify(before.body)}`);

  completion = await chatCompletion(secret);
  assert.equal(completion.status, 200, JSON.stringify(completion.body).slice(0, 2000));
  assert.equal(completion.body.object, "chat.completion", JSON.stringify(completion.body));
  assert.equal(completion.body.choices?.[0]?.message?.role, "assistant", JSON.stringify(completion.body));
  assert.equal(typeof completion.body.choices[0].message.content, "string");
  const used = completion.body.usage;
  assert.ok(used?.prompt_tokens > 0 && used.completion_tokens > 0 && used.completion_tokens <= 8, JSON.stringify(used));

  // Loaded by the request: the instance and the gateway's model are ready.
  const instances = await api("GET", "/api/v1/instances");
  assert.equal(instances.body.find((v) => v.name === "tiny")?.phase, "ready", JSON.stringify(instances.body));
  const view = await until("/api/v1/gateway", (v) => v.models.find((m) => m.name === "tiny")?.state === "ready", "GET /gateway has tiny ready");
  assert.ok(view.models.find((m) => m.name === "tiny").last_used_at_ms > 0);

  // The page reads again every few seconds: the row turns ready, the key was used.
  await page.waitForFunction(() => document.querySelector('[data-testid="gateway-model"][data-name="tiny"]')?.getAttribute("data-state") === "ready", null, { timeout: 30_000 });
  assert.equal((await modelRow().locator('[data-testid="gateway-model-state"]').textContent()).trim(), "ready");
  await page.waitForFunction(
    (id) => {
      const cells = document.querySelectorAll(`[data-testid="key-row"][data-id="${id}"] td`);
      return cells.length > 3 && cells[3].textContent.trim() !== "never";
    },
    keyId,
    { timeout: 30_000 },
  );
});

test("the Usage tab counts the request: totals, per key and among the recent requests", async () => {
  // The daemon's record of it (written beside the answer, not before it).
  const report = await until("/api/v1/gateway/usage", (u) => u.recent.some((r) => r.key_id === keyId), "GET /gateway/usage lists the request");
  const record = report.recent.find((r) => r.key_id === keyId);
  assert.equal(record.key_name, "e2e");
  assert.equal(record.status, "ok", JSON.stringify(record));
  assert.equal(record.http_status, 200);
  assert.equal(record.stream, false);
  assert.equal(record.prompt_tokens, completion.body.usage.prompt_tokens, JSON.stringify(record));
  assert.equal(record.completion_tokens, completion.body.usage.completion_tokens, JSON.stringify(record));

  await page.locator('[data-testid="tab-usage"]').click();
  await page.locator('[data-testid="usage-page"]').waitFor({ timeout: 15_000 });
  assert.equal(await page.evaluate(() => location.hash), "#/gateway/usage");
  assert.equal(await page.locator('[data-testid="tab-usage"]').getAttribute("aria-current"), "page");

  // Totals: at least this one request, no error.
  await page.waitForFunction(() => {
    const v = document.querySelector('[data-testid="usage-requests"] .value')?.textContent ?? "";
    return Number(v.replace(/\D/g, "")) >= 1;
  }, null, { timeout: 30_000 });
  const count = async (id) => Number((await page.locator(`[data-testid="${id}"] .value`).textContent()).replace(/\D/g, ""));
  assert.ok((await count("usage-requests")) >= 1);
  assert.equal(await count("usage-errors"), 0);
  assert.ok((await count("usage-prompt-tokens")) >= record.prompt_tokens);
  assert.ok((await count("usage-completion-tokens")) >= record.completion_tokens);

  // Per key: the "e2e" row with its request and tokens.
  const keyUsage = page.locator(`[data-testid="usage-key-row"][data-key-id="${keyId}"]`);
  await keyUsage.waitFor({ timeout: 30_000 });
  const keyCells = (await keyUsage.locator("td").allTextContents()).map((c) => c.trim());
  assert.equal(keyCells[0], "e2e");
  assert.equal(keyCells[1], "1", `requests: ${JSON.stringify(keyCells)}`);
  assert.equal(keyCells[2], "0", `errors: ${JSON.stringify(keyCells)}`);
  assert.equal(keyCells[3], String(record.prompt_tokens), `prompt tokens: ${JSON.stringify(keyCells)}`);
  assert.equal(keyCells[4], String(record.completion_tokens), `completion tokens: ${JSON.stringify(keyCells)}`);

  // Recent requests: the model, the key, the route, ok 200, tokens in and out.
  const recent = page.locator('[data-testid="usage-request"]').filter({ has: page.locator("td:nth-child(3)", { hasText: /^e2e$/ }) });
  await recent.first().waitFor({ timeout: 30_000 });
  assert.equal(await recent.count(), 1);
  assert.equal(await recent.getAttribute("data-status"), "ok");
  const cells = (await recent.locator("td").allTextContents()).map((c) => c.trim());
  assert.equal(cells[1], record.model, `model: ${JSON.stringify(cells)}`);
  assert.ok(["tiny", "tiny-alias"].includes(record.model), `recorded model: ${record.model}`);
  assert.equal(cells[3], record.route, `route: ${JSON.stringify(cells)}`);
  assert.match(cells[4], /200$/, `status: ${JSON.stringify(cells)}`);
  assert.equal(cells[7], String(record.prompt_tokens), `in: ${JSON.stringify(cells)}`);
  assert.equal(cells[8], String(record.completion_tokens), `out: ${JSON.stringify(cells)}`);
  assert.equal(cells[10], "", `no error: ${JSON.stringify(cells)}`);

  // Per model too.
  const modelUsage = page.locator(`[data-testid="usage-model-row"][data-model="${record.model}"]`);
  await modelUsage.waitFor({ timeout: 30_000 });

  mkdirSync(artifacts, { recursive: true });
  const shot = join(artifacts, "usage.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`usage screenshot saved to ${shot}`);
});

test("the key is revoked on the page; the same request is then refused with 401", async () => {
  await page.locator('[data-testid="tab-gateway"]').click();
  await page.locator('[data-testid="gateway-page"]').waitFor({ timeout: 15_000 });
  const row = keyRow();
  await row.waitFor({ timeout: 15_000 });
  // Leaving the page forgot the secret: it is not shown again.
  assert.equal(await page.locator('[data-testid="key-secret-panel"]').count(), 0);
  assert.ok(!(await page.locator('[data-testid="gateway-page"]').textContent()).includes(secret), "the secret is not on the page any more");

  // Revoke asks first (Revoke, then "Revoke e2e").
  await row.locator('[data-testid="key-revoke"]').click();
  const confirm = row.locator('[data-testid="key-revoke-confirm"]');
  await confirm.waitFor({ timeout: 10_000 });
  assert.equal((await confirm.textContent()).trim(), "Revoke e2e");
  assert.equal(await row.getAttribute("data-revoked"), "false", "not before the confirmation");
  const revoked = page.waitForResponse((r) => r.request().method() === "DELETE" && r.url().endsWith(`/api/v1/keys/${keyId}`));
  await confirm.click();
  const answer = await revoked;
  assert.equal(answer.status(), 200, await answer.text());
  await page.waitForFunction((id) => document.querySelector(`[data-testid="key-row"][data-id="${id}"]`)?.getAttribute("data-revoked") === "true", keyId, { timeout: 15_000 });
  assert.match(await row.locator('[data-testid="key-revoked"]').textContent(), /^revoked /);
  assert.equal(await row.locator('[data-testid="key-revoke"]').count(), 0, "no Revoke button on a revoked key");
  const keys = await api("GET", "/api/v1/keys");
  assert.ok(keys.body.find((k) => k.id === keyId)?.revoked_at_ms > 0, JSON.stringify(keys.body));

  const refused = await chatCompletion(secret);
  assert.equal(refused.status, 401, JSON.stringify(refused.body));
  assert.match(refused.headers.get("content-type") ?? "", /application\/json/);
  const error = refused.body?.error;
  assert.ok(error && typeof error === "object", `an OpenAI-style error body: ${JSON.stringify(refused.body)}`);
  assert.equal(error.type, "authentication_error", JSON.stringify(refused.body));
  assert.equal(error.code, "invalid_api_key", JSON.stringify(refused.body));
  assert.equal(typeof error.message, "string");
  assert.ok(error.message.length > 0, JSON.stringify(refused.body));
  assert.ok("param" in error, JSON.stringify(refused.body));

  // The model stays ready; the page still shows it.
  assert.equal(await modelRow().getAttribute("data-state"), "ready");
  mkdirSync(artifacts, { recursive: true });
  const shot = join(artifacts, "gateway.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`gateway screenshot saved to ${shot}`);
});
