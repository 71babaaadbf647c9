// The Chat page in a real browser against a real daemon playing the 2× RTX 5060 Ti rig: a CPU
// llama-server registered with the CLI and an on-demand launch profile (context 8192) for a tiny
// GGUF; the model picked on the Chat page (stopped, it loads on send), a message whose reply
// streams in as it is written, a long reply stopped with its text kept, a regenerated reply and
// an edited message as branches flipped with ‹ ›, a reload that keeps everything, reasoning
// switched off (saved in the conversation's params, and a message still accepted), search,
// export, rename and delete; the default reply length shown in the settings, a stop told apart
// from a reply cut at its length (and no error in Usage), and the tiny model's file, which
// carries no chat template, named as such in the chat, the library and the profile's settings.
// Needs RIGDECK_LLAMA_SERVER (a built llama-server) and RIGDECK_TINY_MODEL (a tiny .gguf).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { adminRequest, startDaemon, launchChromium, requiredFile } from "./daemon.mjs";

const llamaServer = requiredFile("RIGDECK_LLAMA_SERVER", "a built llama-server binary");
const tinyModel = requiredFile("RIGDECK_TINY_MODEL", "a tiny GGUF model");
const artifacts = process.env.RIGDECK_ARTIFACTS ?? "/tmp/rigdeck-artifacts";

let daemon;
let browser;
let page;
/** The conversation the tests build up. */
let conversationId;

const api = (method, path, body) => adminRequest(daemon, method, path, body);

/** Waits until `check(conversation detail)` holds, reading the API; says what it saw if not. */
async function untilConversation(check, what, timeoutMs = 15_000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    last = await api("GET", `/api/v1/chat/conversations/${conversationId}`);
    if (last.status === 200 && check(last.body)) return last.body;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms; GET /api/v1/chat/conversations/${conversationId} answered ${last?.status}:\n${JSON.stringify(last?.body, null, 1).slice(0, 3000)}`);
}

const assistants = () => page.locator('[data-testid="chat-message"][data-role="assistant"]');
const lastAssistant = () => assistants().last();

/** Waits for the shown branch's last reply to reach a final state; fails with its text if it is
 *  an error. */
async function replyEnds(timeout = 120_000) {
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
    const s = all[all.length - 1]?.getAttribute("data-status");
    return s && s !== "streaming";
  }, null, { timeout });
  const status = await lastAssistant().getAttribute("data-status");
  if (status === "error") throw new Error(`the reply failed: ${await lastAssistant().innerText()}`);
  return status;
}

/** Sets a sampling field and waits until the conversation holds it. */
async function setSampling(key, value) {
  await page.locator(`[data-testid="sampling-${key}"]`).fill(String(value));
  await page.locator(`[data-testid="sampling-${key}"]`).press("Tab");
  await untilConversation((d) => d.conversation.params[key] === value, `params.${key} = ${value}`);
}

/** Records, at every change of the page, the length and state of the last reply's text. */
async function recordGrowth() {
  await page.evaluate(() => {
    window.__growth = [];
    window.__statusLines = [];
    const observer = new MutationObserver(() => {
      const all = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
      const last = all[all.length - 1];
      const line = document.querySelector('[data-testid="status-line"]')?.textContent;
      if (line && !window.__statusLines.includes(line)) window.__statusLines.push(line);
      if (!last) return;
      // The length of the text the shown render came from: rendered Markdown may shrink as a
      // closing marker arrives (`*a` → emphasised `a`), the text it shows never does.
      const len = Number(last.querySelector('[data-testid="message-content"]')?.getAttribute("data-source-length") ?? 0);
      const status = last.getAttribute("data-status");
      const g = window.__growth;
      const prev = g[g.length - 1];
      if (!prev || prev.len !== len || prev.status !== status) g.push({ id: last.getAttribute("data-id"), len, status, t: performance.now() });
    });
    observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
    window.__stopGrowth = () => observer.disconnect();
  });
}

before(async () => {
  daemon = await startDaemon("2x5060ti.json");
  execFileSync(process.env.RIGDECK_BIN, ["engines", "register", llamaServer], {
    env: { ...process.env, RIGDECK_CONFIG_DIR: join(dirname(daemon.dataDir), "config"), RIGDECK_DATA_DIR: daemon.dataDir, RUST_LOG: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const build = (await api("GET", "/api/v1/engines")).body[0];
  const created = await api("POST", "/api/v1/profiles", {
    name: "tiny",
    engine_build_id: build.id,
    model: tinyModel,
    placement: { context: 8192 },
    gateway: { on_demand: true },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
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

test("the Chat page offers the on-demand model, stopped, to load on send", async () => {
  await page.locator('nav a[href="#/chat"]').click();
  await page.locator('[data-testid="chat-page"]').waitFor();
  const models = await api("GET", "/api/v1/chat/models");
  assert.equal(models.status, 200, JSON.stringify(models.body));
  const tiny = models.body.find((m) => m.name === "tiny");
  assert.ok(tiny, `GET /chat/models lists the profile: ${JSON.stringify(models.body)}`);
  assert.equal(tiny.on_demand, true);
  assert.equal(tiny.state, "stopped");
  const select = page.locator('[data-testid="model-select"]');
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="model-select"] option')].some((o) => o.value === "tiny"), null, { timeout: 15_000 });
  await select.selectOption("tiny");
  assert.equal(await select.inputValue(), "tiny");
  assert.equal(await page.locator('[data-testid="model-state"]').getAttribute("data-state"), "stopped");
  assert.match(await page.locator('[data-testid="model-note"]').textContent(), /loads when you send/);
  await page.locator('[data-testid="chat-empty"]').waitFor();
  // No max tokens set: the settings say how long a reply may be (2048: the engine is not running).
  assert.equal(tiny.default_max_tokens, 2048);
  assert.match(await page.locator('[data-testid="default-reply-length"]').textContent(), /Replies stop at 2048 tokens/);
  assert.equal(await page.locator('[data-testid="sampling-max_tokens"]').getAttribute("placeholder"), "2048 (default)");
});

test("a message is sent and the reply streams in as it is written", async () => {
  // A short reply for this one (the tiny model writes about 20 tokens a second on a CPU).
  await page.locator('[data-testid="sampling-max_tokens"]').fill("120");
  await page.locator('[data-testid="sampling-max_tokens"]').press("Tab");
  await recordGrowth();
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && /\/api\/v1\/chat\/conversations\/\d+\/messages$/.test(r.url()));
  await page.locator('[data-testid="composer-text"]').fill("Hello there, tiny model. Tell me about GPUs.");
  await page.locator('[data-testid="composer-text"]').press("Enter");
  const answer = await sent;
  assert.equal(answer.status(), 202, await answer.text());
  await page.waitForFunction(() => /^#\/chat\/\d+$/.test(location.hash), null, { timeout: 10_000 });
  conversationId = Number((await page.evaluate(() => location.hash)).split("/").pop());
  // The user's message is shown at once, and the conversation is listed under its first line.
  const user = page.locator('[data-testid="chat-message"][data-role="user"]');
  await user.first().waitFor();
  assert.equal(await user.first().locator('[data-testid="message-content"]').textContent(), "Hello there, tiny model. Tell me about GPUs.");
  const item = page.locator(`[data-testid="conversation-item"][data-id="${conversationId}"]`);
  await item.waitFor({ timeout: 10_000 });
  assert.match(await item.locator('[data-testid="conversation-title"]').textContent(), /Hello there, tiny model/);

  assert.equal(await replyEnds(), "complete");
  const growth = await page.evaluate(() => {
    window.__stopGrowth();
    return { growth: window.__growth, lines: window.__statusLines };
  });
  const streamed = growth.growth.filter((g) => g.status === "streaming" && g.len > 0);
  const lengths = streamed.map((g) => g.len);
  assert.ok(new Set(lengths).size >= 3, `the text grew in steps while streaming: ${JSON.stringify(growth.growth)}`);
  assert.deepEqual(lengths, [...lengths].sort((a, b) => a - b), "it only grew");
  assert.ok(streamed.at(-1).t - streamed[0].t > 300, `over time: ${JSON.stringify(streamed)}`);
  if (growth.lines.length > 0) console.log(`status lines seen while the model loaded: ${growth.lines.join(" | ")}`);

  // The params were saved with the conversation; the reply's numbers are shown.
  const detail = await untilConversation((d) => d.messages.some((m) => m.role === "assistant" && m.status === "complete"), "the reply is complete");
  assert.equal(detail.conversation.params.max_tokens, 120);
  assert.equal(detail.conversation.model, "tiny");
  const reply = detail.messages.find((m) => m.role === "assistant");
  assert.ok(reply.content.length > 0, "the reply has text");
  assert.ok(reply.stats.completion_tokens > 0 && reply.stats.completion_tokens <= 120, JSON.stringify(reply.stats));
  const stats = lastAssistant().locator('[data-testid="message-stats"]');
  await stats.waitFor();
  assert.match(await stats.textContent(), /tok\/s/);
  assert.match(await stats.textContent(), /tokens/);
  // The context bar: the last reply's tokens against the model's context.
  const ctx = page.locator('[data-testid="context-use"]');
  await page.waitForFunction(() => Number(document.querySelector('[data-testid="context-use"]')?.getAttribute("data-total")) > 0, null, { timeout: 15_000 });
  const used = Number(await ctx.getAttribute("data-used"));
  assert.equal(used, reply.stats.prompt_tokens + reply.stats.completion_tokens);
  const models = (await api("GET", "/api/v1/chat/models")).body;
  assert.equal(models.find((m) => m.name === "tiny").state, "ready", "the on-demand model was loaded by the send");
});

test("a long reply is stopped, its text so far kept", async () => {
  await setSampling("max_tokens", 4000);
  const before = await assistants().count();
  await page.locator('[data-testid="composer-text"]').fill("Now write a very long story.");
  await page.locator('[data-testid="composer-send"]').click();
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]').length > n, before, { timeout: 10_000 });
  // Streaming: the text grows and the live rate shows (once it spans a quarter second); then Stop.
  try {
    await page.waitForFunction(() => {
      const all = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
      const last = all[all.length - 1];
      return (
        last?.getAttribute("data-status") === "streaming" &&
        (last.querySelector('[data-testid="message-content"]')?.textContent.length ?? 0) > 40 &&
        /^\d+(\.\d)? tok\/s$/.test(last.querySelector('[data-testid="live-tps"]')?.textContent ?? "")
      );
    }, null, { timeout: 60_000 });
  } finally {
    // Whatever happened, the 4000-token reply must not run on into the next tests.
    await page.locator('[data-testid="composer-stop"]').click({ timeout: 5_000 }).catch(() => {});
  }
  assert.equal(await replyEnds(15_000), "stopped");
  assert.match(await lastAssistant().locator('[data-testid="message-note"]').textContent(), /Stopped by you; the text so far is kept/);
  assert.equal(await lastAssistant().locator('[data-testid="message-state"]').textContent(), "stopped by you");
  // Its numbers stay: the tokens that arrived and their speed.
  assert.match(await lastAssistant().locator('[data-testid="message-stats"]').textContent(), /tok\/s/);
  const shown = (await lastAssistant().locator('[data-testid="message-content"]').textContent()).length;
  assert.ok(shown > 40, "the partial text stays on the page");
  const id = Number(await lastAssistant().getAttribute("data-id"));
  const detail = await untilConversation((d) => d.messages.find((m) => m.id === id)?.status === "stopped", "the reply is stopped");
  const stopped = detail.messages.find((m) => m.id === id);
  assert.ok(stopped.content.length > 40, "the daemon kept the partial text");
  assert.ok((stopped.stats.completion_tokens ?? 0) < 4000, JSON.stringify(stopped.stats));
  assert.ok(stopped.stats.completion_tokens > 5 && stopped.stats.decode_tps > 0, JSON.stringify(stopped.stats));
  // The gateway recorded the stop as a cancel, which Usage does not count as an error.
  const usage = await api("GET", "/api/v1/gateway/usage");
  assert.ok(usage.body.recent.some((r) => r.status === "cancelled"), JSON.stringify(usage.body.recent.slice(0, 3)));
  assert.equal(usage.body.totals.errors, 0, JSON.stringify(usage.body.totals));
  // The composer is ready again.
  await page.locator('[data-testid="composer-send"]').waitFor();
});

test("regenerate makes a branch, and ‹ › flip between the versions", async () => {
  await setSampling("max_tokens", 60);
  const oldId = Number(await lastAssistant().getAttribute("data-id"));
  await lastAssistant().locator('[data-testid="message-regenerate"]').click();
  await page.waitForFunction((old) => {
    const all = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
    return Number(all[all.length - 1]?.getAttribute("data-id")) > old;
  }, oldId, { timeout: 15_000 });
  assert.equal(await replyEnds(), "complete");
  const newId = Number(await lastAssistant().getAttribute("data-id"));
  assert.equal(await lastAssistant().locator('[data-testid="sibling-pos"]').textContent(), "2/2");

  await lastAssistant().locator('[data-testid="sibling-prev"]').click();
  await page.waitForFunction((old) => {
    const all = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
    return Number(all[all.length - 1]?.getAttribute("data-id")) === old;
  }, oldId, { timeout: 10_000 });
  assert.equal(await lastAssistant().locator('[data-testid="sibling-pos"]').textContent(), "1/2");
  assert.equal(await lastAssistant().getAttribute("data-status"), "stopped");
  await untilConversation((d) => d.conversation.active_leaf === oldId, "active_leaf moves to the first version");

  await lastAssistant().locator('[data-testid="sibling-next"]').click();
  await page.waitForFunction((id) => {
    const all = document.querySelectorAll('[data-testid="chat-message"][data-role="assistant"]');
    return Number(all[all.length - 1]?.getAttribute("data-id")) === id;
  }, newId, { timeout: 10_000 });
  assert.equal(await lastAssistant().locator('[data-testid="sibling-pos"]').textContent(), "2/2");
  await untilConversation((d) => d.conversation.active_leaf === newId, "active_leaf moves back to the new version");
});

test("editing a message sends a new version beside it", async () => {
  const users = page.locator('[data-testid="chat-message"][data-role="user"]');
  const lastUser = users.last();
  const oldUserId = Number(await lastUser.getAttribute("data-id"));
  await lastUser.locator('[data-testid="message-edit"]').click();
  await lastUser.locator('[data-testid="edit-text"]').fill("Now write a short poem instead.");
  await lastUser.locator('[data-testid="edit-send"]').click();
  await page.waitForFunction((old) => {
    const all = document.querySelectorAll('[data-testid="chat-message"][data-role="user"]');
    return Number(all[all.length - 1]?.getAttribute("data-id")) > old;
  }, oldUserId, { timeout: 15_000 });
  assert.equal(await users.last().locator('[data-testid="message-content"]').textContent(), "Now write a short poem instead.");
  assert.equal(await users.last().locator('[data-testid="sibling-pos"]').textContent(), "2/2");
  assert.equal(await replyEnds(), "complete");
  const detail = await untilConversation((d) => d.messages.filter((m) => m.role === "user").length === 3, "three user messages");
  const edited = detail.messages.filter((m) => m.role === "user").at(-1);
  assert.equal(edited.parent_id, detail.messages.find((m) => m.id === oldUserId).parent_id, "the edit is a sibling of the original");
  // Back to the original question: its newest reply (the regenerated one) shows.
  await users.last().locator('[data-testid="sibling-prev"]').click();
  await page.waitForFunction((id) => {
    const all = document.querySelectorAll('[data-testid="chat-message"][data-role="user"]');
    return Number(all[all.length - 1]?.getAttribute("data-id")) === id;
  }, oldUserId, { timeout: 10_000 });
  assert.equal(await lastAssistant().locator('[data-testid="sibling-pos"]').textContent(), "2/2");
});

test("a reload shows the same conversation and branch", async () => {
  const shownBefore = await page.locator('[data-testid="chat-message"]').evaluateAll((els) => els.map((e) => e.getAttribute("data-id")));
  await page.reload();
  await page.locator('[data-testid="chat-page"]').waitFor({ timeout: 15_000 });
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="chat-message"]').length === n, shownBefore.length, { timeout: 15_000 });
  const shownAfter = await page.locator('[data-testid="chat-message"]').evaluateAll((els) => els.map((e) => e.getAttribute("data-id")));
  assert.deepEqual(shownAfter, shownBefore);
  assert.equal(await lastAssistant().locator('[data-testid="sibling-pos"]').textContent(), "2/2");
  await page.locator(`[data-testid="conversation-item"][data-id="${conversationId}"]`).waitFor();
  assert.match(await page.locator('[data-testid="chat-title"]').textContent(), /Hello there, tiny model/);
  assert.equal(await page.locator('[data-testid="sampling-max_tokens"]').inputValue(), "60");
});

test("reasoning switched off is saved in the conversation, and a message is still accepted", async () => {
  await page.locator('[data-testid="reasoning-off"]').click();
  assert.equal(await page.locator('[data-testid="reasoning-off"]').getAttribute("aria-pressed"), "true");
  await untilConversation((d) => d.conversation.params.reasoning === "off", 'params.reasoning = "off"');
  await page.locator('[data-testid="reasoning-effort"]').isDisabled();
  const sent = page.waitForResponse((r) => r.request().method() === "POST" && /\/api\/v1\/chat\/conversations\/\d+\/messages$/.test(r.url()));
  await page.locator('[data-testid="composer-text"]').fill("Answer at once: what is a GPU?");
  await page.locator('[data-testid="composer-text"]').press("Enter");
  const answer = await sent;
  assert.equal(answer.status(), 202, await answer.text());
  assert.equal(await replyEnds(), "complete");
  const detail = await untilConversation((d) => d.conversation.params.reasoning === "off", "reasoning still off");
  assert.equal(detail.conversation.params.max_tokens, 60, "the other params are kept");
  mkdirSync(artifacts, { recursive: true });
  const shot = join(artifacts, "chat.png");
  await page.screenshot({ path: shot });
  console.log(`chat screenshot saved to ${shot}`);
});

test("search finds the conversation by its text; export saves it", async () => {
  await page.locator('[data-testid="chat-search"]').fill("short poem");
  await page.waitForFunction(
    (id) => {
      const items = [...document.querySelectorAll('[data-testid="conversation-item"]')];
      return items.length === 1 && items[0].getAttribute("data-id") === String(id) && items[0].querySelector('[data-testid="conversation-snippet"]');
    },
    conversationId,
    { timeout: 10_000 },
  );
  await page.locator('[data-testid="chat-search"]').fill("no such words anywhere");
  await page.locator('[data-testid="chat-list-empty"]').waitFor({ timeout: 10_000 });
  await page.locator('[data-testid="chat-search"]').fill("");
  await page.locator(`[data-testid="conversation-item"][data-id="${conversationId}"]`).waitFor({ timeout: 10_000 });

  const download = page.waitForEvent("download");
  await page.locator('[data-testid="export-markdown"]').click();
  const file = await download;
  assert.match(file.suggestedFilename(), /\.md$/);
  const text = readFileSync(await file.path(), "utf8");
  assert.ok(text.includes("Hello there, tiny model. Tell me about GPUs."), text.slice(0, 500));
  const json = await api("GET", `/api/v1/chat/conversations/${conversationId}/export?format=json`);
  assert.equal(json.status, 200);
});

test("a conversation is renamed and deleted from the sidebar", async () => {
  const created = await api("POST", "/api/v1/chat/conversations", { model: "tiny", title: "Scratch" });
  assert.ok(created.status === 200 || created.status === 201, JSON.stringify(created.body));
  const id = created.body.id;
  await page.reload();
  const item = page.locator(`[data-testid="conversation-item"][data-id="${id}"]`);
  await item.waitFor({ timeout: 15_000 });
  await item.hover();
  await item.locator('[data-testid="conversation-rename"]').click();
  await item.locator('[data-testid="conversation-title-input"]').fill("Renamed scratch");
  await item.locator('[data-testid="conversation-title-input"]').press("Enter");
  await page.waitForFunction((cid) => document.querySelector(`[data-testid="conversation-item"][data-id="${cid}"] [data-testid="conversation-title"]`)?.textContent === "Renamed scratch", id, { timeout: 10_000 });
  assert.equal((await api("GET", `/api/v1/chat/conversations/${id}`)).body.conversation.title, "Renamed scratch");
  await item.hover();
  await item.locator('[data-testid="conversation-delete"]').click();
  await item.locator('[data-testid="conversation-delete-confirm"]').click();
  await page.waitForFunction((cid) => !document.querySelector(`[data-testid="conversation-item"][data-id="${cid}"]`), id, { timeout: 10_000 });
  assert.equal((await api("GET", `/api/v1/chat/conversations/${id}`)).status, 404);
  // The conversation of the other tests is still there.
  await page.locator(`[data-testid="conversation-item"][data-id="${conversationId}"]`).waitFor();
});

test("a reply that reaches its length says so, with the length", async () => {
  const created = await api("POST", "/api/v1/chat/conversations", { model: "tiny", title: "Short", params: { max_tokens: 3 } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  await page.goto(`${daemon.base}/#/chat/${created.body.id}`);
  await page.locator('[data-testid="composer-text"]').fill("Tell me everything about GPUs.");
  await page.locator('[data-testid="composer-send"]').click();
  await page.locator('[data-testid="chat-message"][data-role="assistant"]').first().waitFor({ timeout: 10_000 });
  assert.equal(await replyEnds(), "complete");
  assert.equal(await lastAssistant().locator('[data-testid="message-state"]').textContent(), "stopped: length limit (3 tokens)");
  assert.match(await lastAssistant().locator('[data-testid="message-note"]').textContent(), /raise Max tokens/);
});

test("the tiny model's file carries no chat template: the chat, the library and the profile say so", async () => {
  // The library reads the model's folder.
  const folder = dirname(tinyModel);
  const put = await api("PUT", "/api/v1/settings", { model_folders: [folder] });
  assert.equal(put.status, 200, JSON.stringify(put.body));
  const rescan = await api("POST", "/api/v1/models/rescan", {});
  const entry = rescan.body.find((e) => e.path === tinyModel);
  assert.ok(entry, `the library lists the tiny model: ${JSON.stringify(rescan.body.map((e) => e.path))}`);
  assert.equal(entry.gguf.chat_template, null);

  await page.goto(`${daemon.base}/#/chat/${conversationId}`);
  const warning = page.locator('[data-testid="chat-template-warning"]');
  await warning.waitFor({ timeout: 15_000 });
  assert.match(await warning.textContent(), /This file carries no chat template: llama-server would use ChatML/);
  assert.match(await warning.textContent(), /chat template to "llama3"/);

  await page.goto(`${daemon.base}/#/models`);
  const row = page.locator(`[data-testid="model-row"][data-path="${tinyModel}"]`);
  await row.locator('[data-testid="model-no-template"]').waitFor({ timeout: 15_000 });
  // The architecture's template comes with the list of templates, read once.
  await page.waitForFunction((path) => /"llama3"/.test(document.querySelector(`[data-testid="model-row"][data-path="${path}"] [data-testid="model-no-template"]`)?.textContent ?? ""), tinyModel, { timeout: 15_000 });
  assert.match(await row.locator('[data-testid="model-no-template"]').textContent(), /no chat template: llama-server would use ChatML; set the launch profile's chat template to "llama3" \(llama's own\)/);

  // The profile's settings start with the architecture's template chosen; saved, the chat's
  // warning goes.
  await page.goto(`${daemon.base}/#/instances`);
  const profile = page.locator('[data-testid="profile-row"][data-name="tiny"]');
  await profile.locator('[data-testid="profile-edit"]').click();
  const select = page.locator('[data-testid="settings-chat-template"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="settings-chat-template"]')?.value === "llama3", null, { timeout: 15_000 });
  assert.match(await page.locator('[data-testid="settings-template-note"]').textContent(), /"llama3" is llama's own/);
  assert.ok((await select.locator("option").count()) > 40, "the templates llama-server knows are offered");
  await page.locator('[data-testid="settings-save"]').click();
  await page.waitForFunction(() => !document.querySelector('[data-testid="profile-settings"]'), null, { timeout: 15_000 });
  const saved = await api("GET", "/api/v1/profiles/tiny");
  assert.equal(saved.body.chat_template ?? saved.body.profile?.chat_template, "llama3", JSON.stringify(saved.body));
  const models = (await api("GET", "/api/v1/chat/models")).body;
  assert.equal(models.find((m) => m.name === "tiny").no_chat_template, false);
});
