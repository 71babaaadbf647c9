// The Chat page's open conversation: its settings and every message of every branch, kept current
// by `chat.message` and `chat.delta` events (lib/telemetry/live routes them here); the models to
// pick from; the settings of a chat not yet sent (a draft); and the actions — send, edit,
// regenerate, stop, flip between branches, change the model, prompt or sampling. Deltas that cannot
// be applied yet (one went missing, or the reply is not known yet) wait in a buffer while the
// conversation is read again; a final `chat.message` always brings the whole text. One instance.

import { api, ApiError, isAbort } from '../api/client';
import type { ChatDelta, ChatMessage, ChatModel, ChatParams, Conversation, ConversationPatch } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';
import { applyDelta, isFinal, mergeAll, upsertMessage } from './delta';
import { pushSample, type RateSample } from './stats';
import { leafForSibling, visiblePath } from './tree';
import { defaultModel, titleFrom } from './models';
import { chatList } from './list.svelte';

/** What the events tell of a reply being written, beyond its text. */
export interface LiveReply {
  statusLine: string | null;
  samples: RateSample[];
  completionTokens: number;
  elapsedMs: number;
  /** When reasoning text first came, and when the answer's first text came after it. */
  reasoningFromMs: number | null;
  reasoningToMs: number | null;
}

export interface Draft {
  model: string | null;
  system_prompt: string;
  params: ChatParams;
}

/** Reads of the conversation are at least this far apart (a gap asks for one at every delta). */
export const REFETCH_SPACING_MS = 1000;
/** How long a reply may wait for its question before the conversation is read. */
const ORPHAN_WAIT_MS = 1500;
/** The most deltas held for one reply while waiting for a read. */
const MAX_PENDING = 4000;
const LAST_MODEL_KEY = 'rigdeck.chat.model';

function storedModel(): string | null {
  try {
    return globalThis.localStorage?.getItem(LAST_MODEL_KEY) ?? null;
  } catch {
    return null;
  }
}

function rememberModel(name: string): void {
  try {
    globalThis.localStorage?.setItem(LAST_MODEL_KEY, name);
  } catch {
    // Private mode: the next new chat picks a ready model instead.
  }
}

export class ChatState {
  models = $state.raw<ChatModel[] | null>(null);
  modelsError = $state.raw<Problem | null>(null);

  /** The conversation on screen; null with `conversation` null is a new chat. */
  conversationId = $state<number | null>(null);
  conversation = $state.raw<Conversation | null>(null);
  messages = $state.raw<ChatMessage[]>([]);
  loading = $state(false);
  loadError = $state.raw<Problem | null>(null);
  live = $state.raw<Record<number, LiveReply>>({});
  draft = $state.raw<Draft>({ model: null, system_prompt: '', params: {} });

  sending = $state(false);
  /** A failed send, edit, regenerate, stop or flip: shown above the composer. */
  actionError = $state.raw<Problem | null>(null);
  settingsError = $state.raw<Problem | null>(null);
  /** Replies whose Stop or Regenerate is on its way. */
  busy = $state.raw<Record<number, 'stop' | 'regenerate'>>({});

  private pending = new Map<number, ChatDelta[]>();
  /** Messages whose announcement (or question) is awaited before the conversation is read. */
  private waiting = new Set<number>();
  private loadSeq = 0;
  private patchSeq = 0;
  private refetchTimer: ReturnType<typeof setTimeout> | null = null;
  private refetching = false;
  private refetchAgain = false;
  private lastRefetchAt = 0;
  /** PATCHes on their way: a read meanwhile does not replace the conversation's settings. */
  private patchesInFlight = 0;
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): Problem | null {
    const p = problemOrSignOut(e, this.onUnauthorized);
    // A body over the daemon's limit is refused before any handler sees it, in plain text.
    if (p && e instanceof ApiError && e.status === 413) {
      return { code: p.code, message: `The daemon refused the message as too large (${p.message}): attach fewer or smaller images.` };
    }
    return p;
  }

  /** The branch shown. */
  get path(): ChatMessage[] {
    return visiblePath(this.messages, this.conversation?.active_leaf ?? null);
  }

  /** The model the conversation (or the draft) uses. */
  get modelName(): string | null {
    return this.conversation ? this.conversation.model : this.draft.model;
  }

  get systemPrompt(): string {
    return this.conversation ? this.conversation.system_prompt : this.draft.system_prompt;
  }

  get params(): ChatParams {
    return this.conversation ? this.conversation.params : this.draft.params;
  }

  /** A reply of the shown branch being written. */
  get streaming(): ChatMessage | null {
    const last = this.path.at(-1);
    return last && last.role === 'assistant' && last.status === 'streaming' ? last : null;
  }

  async loadModels(): Promise<void> {
    try {
      const list = await api.chatModels();
      this.models = list;
      this.modelsError = null;
      if (this.draft.model == null || !list.some((m) => m.name === this.draft.model)) {
        this.draft = { ...this.draft, model: defaultModel(list, this.draft.model ?? storedModel()) };
      }
    } catch (e) {
      if (!isAbort(e)) this.modelsError = this.fail(e);
    }
  }

  // ---- Opening ----

  /** Shows a conversation (null: a new chat). Opening the one on screen reads nothing. */
  open(id: number | null): void {
    if (id === this.conversationId && (id == null || this.conversation?.id === id || this.loading)) return;
    this.reset();
    this.conversationId = id;
    if (id == null) {
      this.draft = { model: defaultModel(this.models, storedModel()), system_prompt: '', params: {} };
      return;
    }
    void this.load(id);
  }

  /** A new chat with `model` chosen (a model just started by one click): remembered, so the
   *  model list's next refresh keeps it. */
  startWith(model: string): void {
    rememberModel(model);
    this.reset();
    this.conversationId = null;
    this.draft = { model, system_prompt: '', params: {} };
    void this.loadModels();
  }

  private reset(): void {
    this.loadSeq++;
    this.patchSeq++;
    this.conversation = null;
    this.messages = [];
    this.live = {};
    this.pending.clear();
    this.loadError = null;
    this.actionError = null;
    this.settingsError = null;
    this.busy = {};
    this.loading = false;
    if (this.refetchTimer) clearTimeout(this.refetchTimer);
    this.refetchTimer = null;
    this.refetchAgain = false;
  }

  private async load(id: number): Promise<void> {
    const mine = ++this.loadSeq;
    this.loading = true;
    try {
      const d = await api.conversation(id);
      if (mine !== this.loadSeq || this.conversationId !== id) return;
      this.conversation = d.conversation;
      this.messages = mergeAll(this.messages, d.messages);
      this.loadError = null;
      for (const mid of [...this.pending.keys()]) this.drain(mid);
    } catch (e) {
      if (mine === this.loadSeq && !isAbort(e)) this.loadError = this.fail(e);
    } finally {
      if (mine === this.loadSeq) this.loading = false;
    }
  }

  /** Reads the conversation again soon (at most once a second), keeping text the events brought. */
  refetchSoon(): void {
    const id = this.conversationId;
    if (id == null || this.conversation == null) return;
    if (this.refetching) {
      this.refetchAgain = true;
      return;
    }
    if (this.refetchTimer) return;
    const wait = Math.max(0, this.lastRefetchAt + REFETCH_SPACING_MS - Date.now());
    this.refetchTimer = setTimeout(() => {
      this.refetchTimer = null;
      void this.refetch(id);
    }, wait);
  }

  private async refetch(id: number): Promise<void> {
    if (this.conversationId !== id) return;
    this.refetching = true;
    this.lastRefetchAt = Date.now();
    const seq = this.loadSeq;
    try {
      const d = await api.conversation(id);
      if (seq !== this.loadSeq || this.conversationId !== id) return;
      // A settings change on its way is newer than this read.
      if (this.patchesInFlight === 0) this.conversation = d.conversation;
      this.messages = mergeAll(this.messages, d.messages);
      for (const mid of [...this.pending.keys()]) this.drain(mid);
    } catch (e) {
      if (!isAbort(e)) this.fail(e);
    } finally {
      this.refetching = false;
      if (this.refetchAgain) {
        this.refetchAgain = false;
        this.refetchSoon();
      }
    }
  }

  /** The event stream fell behind or came back: what it would have said is read again. */
  resync(): void {
    if (this.conversationId != null && this.conversation != null) this.refetchSoon();
  }

  // ---- Events ----

  ingestMessage(m: ChatMessage): void {
    chatList.noteMessage(m);
    if (m.conversation_id !== this.conversationId) return;
    this.upsert(m);
    // A reply is announced before the send's answer brings its question; should that never
    // come (another window sent it), read the conversation.
    if (m.parent_id != null && !this.messages.some((x) => x.id === m.parent_id)) this.readUnlessKnown(m.id, m.parent_id);
  }

  ingestDelta(d: ChatDelta): void {
    if (d.conversation_id !== this.conversationId) return;
    this.noteLive(d);
    const list = this.pending.get(d.message_id) ?? [];
    if (list.length >= MAX_PENDING) list.shift();
    list.push(d);
    this.pending.set(d.message_id, list);
    this.drain(d.message_id);
  }

  private noteLive(d: ChatDelta): void {
    const prev = this.live[d.message_id];
    const reasoningFromMs = prev?.reasoningFromMs ?? (d.reasoning !== '' ? d.elapsed_ms : null);
    let reasoningToMs = prev?.reasoningToMs ?? null;
    if (reasoningToMs == null && reasoningFromMs != null && d.content !== '') reasoningToMs = d.elapsed_ms;
    const samples = d.completion_tokens > 0 ? pushSample(prev?.samples ?? [], { elapsedMs: d.elapsed_ms, tokens: d.completion_tokens }) : (prev?.samples ?? []);
    this.live = {
      ...this.live,
      [d.message_id]: {
        statusLine: d.status_line,
        samples,
        completionTokens: Math.max(prev?.completionTokens ?? 0, d.completion_tokens),
        elapsedMs: d.elapsed_ms,
        reasoningFromMs,
        reasoningToMs,
      },
    };
  }

  /** Applies the held deltas of a reply that now fit; what is left waits for a read. */
  private drain(messageId: number): void {
    const list = this.pending.get(messageId);
    if (!list || list.length === 0) return;
    const i = this.messages.findIndex((m) => m.id === messageId);
    if (i < 0) {
      // Not known yet: its chat.message (or the send's answer) is on the way; read if it is not.
      this.readUnlessKnown(messageId);
      return;
    }
    let m = this.messages[i]!;
    if (m.status !== 'streaming') {
      this.pending.delete(messageId);
      return;
    }
    let left = list;
    for (let progress = true; progress && left.length > 0; ) {
      progress = false;
      const rest: ChatDelta[] = [];
      for (const d of left) {
        const r = applyDelta(m, d);
        if (r.kind === 'applied') {
          m = r.message;
          progress = true;
        } else if (r.kind === 'gap') rest.push(d);
      }
      left = rest;
    }
    if (m !== this.messages[i]) {
      const out = this.messages.slice();
      out[i] = m;
      this.messages = out;
    }
    if (left.length > 0) {
      this.pending.set(messageId, left);
      this.refetchSoon();
    } else this.pending.delete(messageId);
  }

  /** Reads the conversation if message `id` is still unknown (or without its question) in a
   *  moment: its announcement or the send's answer normally comes first. */
  private readUnlessKnown(id: number, parent: number | null = null): void {
    if (this.waiting.has(id)) return;
    this.waiting.add(id);
    const conversation = this.conversationId;
    setTimeout(() => {
      this.waiting.delete(id);
      if (conversation !== this.conversationId) return;
      const known = this.messages.some((x) => x.id === id) && (parent == null || this.messages.some((x) => x.id === parent));
      if (!known) this.refetchSoon();
    }, ORPHAN_WAIT_MS);
  }

  /** A reply ended: its final text came with it; the rate and load line are done. */
  private finish(messageId: number): void {
    this.pending.delete(messageId);
    const l = this.live[messageId];
    if (l && l.statusLine != null) this.live = { ...this.live, [messageId]: { ...l, statusLine: null } };
  }

  private upsert(m: ChatMessage): void {
    if (m.conversation_id !== this.conversationId) return;
    this.messages = upsertMessage(this.messages, m);
    if (isFinal(m.status)) this.finish(m.id);
    else this.drain(m.id);
  }

  // ---- Actions ----

  /** Sends a message at the end of the shown branch; a new chat is created first. False when it
   *  failed (the composer keeps the text). */
  async send(content: string, images: string[]): Promise<boolean> {
    return this.posting(async () => {
      let id = this.conversationId;
      if (id == null || this.conversation == null) {
        const model = this.draft.model;
        if (!model) throw new Error('Choose a model first.');
        const conv = await api.createConversation({
          model,
          title: titleFrom(content, images.length),
          system_prompt: this.draft.system_prompt,
          params: this.draft.params,
        });
        rememberModel(model);
        this.reset();
        this.conversationId = conv.id;
        this.conversation = conv;
        chatList.noteConversation(conv);
        id = conv.id;
      }
      const parent = this.path.at(-1)?.id ?? null;
      await this.showPosted(await api.sendMessage(id, { parent_id: parent, content, ...(images.length > 0 ? { images } : {}) }));
      void this.loadModels();
    });
  }

  /** An edited user message: a new sibling of it (same parent), answered anew. */
  async edit(original: ChatMessage, content: string): Promise<boolean> {
    const id = this.conversationId;
    if (id == null) return false;
    return this.posting(async () => {
      await this.showPosted(
        await api.sendMessage(id, {
          parent_id: original.parent_id,
          content,
          ...(original.images.length > 0 ? { images: original.images } : {}),
        }),
      );
    });
  }

  /** A message post (send or edit): one at a time, its refusal shown as the action's error. False
   *  when another was under way or it failed. */
  private async posting(post: () => Promise<void>): Promise<boolean> {
    if (this.sending) return false;
    this.sending = true;
    this.actionError = null;
    try {
      await post();
      return true;
    } catch (e) {
      this.actionError = this.fail(e);
      return false;
    } finally {
      this.sending = false;
    }
  }

  /** The posted message and its reply-to-be shown, the reply followed as it streams. */
  private async showPosted(r: { user: ChatMessage; assistant: ChatMessage }): Promise<void> {
    this.upsert(r.user);
    this.upsert(r.assistant);
    await this.follow(r.assistant.id);
  }

  async regenerate(m: ChatMessage): Promise<void> {
    if (this.busy[m.id]) return;
    this.busy = { ...this.busy, [m.id]: 'regenerate' };
    this.actionError = null;
    try {
      const r = await api.regenerate(m.id);
      this.upsert(r.assistant);
      await this.follow(r.assistant.id);
      void this.loadModels();
    } catch (e) {
      this.actionError = this.fail(e);
    } finally {
      this.clearBusy(m.id);
    }
  }

  async stop(m: ChatMessage): Promise<void> {
    if (this.busy[m.id]) return;
    this.busy = { ...this.busy, [m.id]: 'stop' };
    this.actionError = null;
    try {
      this.upsert(await api.stopMessage(m.id));
    } catch (e) {
      this.actionError = this.fail(e);
    } finally {
      this.clearBusy(m.id);
    }
  }

  private clearBusy(id: number): void {
    const { [id]: _, ...rest } = this.busy;
    this.busy = rest;
  }

  /** A new reply is the newest leaf, shown by itself unless the conversation names a leaf: then
   *  that is moved to it. */
  private async follow(leaf: number): Promise<void> {
    const c = this.conversation;
    if (!c || c.active_leaf == null || c.active_leaf === leaf) return;
    await this.patch({ active_leaf: leaf });
  }

  /** Shows another sibling's branch (its newest leaf). */
  async flip(siblingId: number): Promise<void> {
    const leaf = leafForSibling(this.messages, siblingId);
    if (leaf == null || !this.conversation) return;
    this.actionError = null;
    await this.patch({ active_leaf: leaf });
  }

  /** Changes the conversation: shown at once, saved by PATCH; a refusal puts it back. */
  private async patch(p: ConversationPatch): Promise<boolean> {
    const c = this.conversation;
    if (!c) return false;
    const mine = ++this.patchSeq;
    const before = c;
    this.conversation = { ...c, ...p } as Conversation;
    this.patchesInFlight++;
    try {
      const saved = await api.updateConversation(c.id, p);
      if (mine === this.patchSeq && this.conversation?.id === saved.id) this.conversation = saved;
      chatList.noteConversation(saved);
      return true;
    } catch (e) {
      const problem = this.fail(e);
      if (mine === this.patchSeq && this.conversation?.id === c.id) this.conversation = before;
      if ('active_leaf' in p) this.actionError = problem;
      else this.settingsError = problem;
      return false;
    } finally {
      this.patchesInFlight--;
    }
  }

  /** A newer copy of the open conversation from elsewhere (the sidebar's rename). */
  adopt(c: Conversation): void {
    if (this.conversation?.id === c.id) this.conversation = { ...this.conversation, title: c.title, updated_at_ms: c.updated_at_ms };
  }

  /** The model, system prompt or params of conversation `id` (null: the draft), if it is still
   *  the one open (a form saving as it goes away must not write into the next one). */
  async updateSettings(id: number | null, p: Pick<ConversationPatch, 'model' | 'system_prompt' | 'params'>): Promise<boolean> {
    if (id !== (this.conversation?.id ?? null)) return false;
    this.settingsError = null;
    if (p.model) rememberModel(p.model);
    if (!this.conversation) {
      this.draft = { ...this.draft, ...p };
      return true;
    }
    return this.patch(p);
  }
}

export const chat = new ChatState();
