// The Chat page's sidebar: the conversations, newest first, searched as the user types (titles
// and message text, asked of the daemon a moment after the last key), renamed and deleted. A
// message or a conversation change seen elsewhere moves its conversation to the top; one not
// listed yet (made in another window) has the list read again. One instance for the app.

import { api, isAbort } from '../api/client';
import type { ChatMessage, Conversation, ConversationSummary } from '../api/types';
import { problemOrSignOut, type Problem } from '../api/problem';

export const SEARCH_DEBOUNCE_MS = 250;

/** The list with a conversation's summary put in (or updated), newest first. */
export function placeSummary(list: readonly ConversationSummary[], s: ConversationSummary): ConversationSummary[] {
  const held = list.find((x) => x.id === s.id);
  const merged = held ? { ...held, ...s, snippet: held.snippet } : s;
  return [merged, ...list.filter((x) => x.id !== s.id)].sort((a, b) => b.updated_at_ms - a.updated_at_ms || b.id - a.id);
}

export class ChatListState {
  items = $state.raw<ConversationSummary[] | null>(null);
  error = $state.raw<Problem | null>(null);
  query = $state('');
  /** The query the items answer. */
  shownQuery = $state('');
  /** Per conversation: a rename or delete on its way, or its refusal. */
  busy = $state.raw<Record<number, boolean>>({});
  itemError = $state.raw<(Problem & { id: number }) | null>(null);

  private seq = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private abort: AbortController | null = null;
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  async load(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.abort?.abort();
    const ctl = new AbortController();
    this.abort = ctl;
    const mine = ++this.seq;
    const q = this.query.trim();
    try {
      const list = await api.conversations(q, ctl.signal);
      if (mine !== this.seq) return;
      this.items = list;
      this.shownQuery = q;
      this.error = null;
    } catch (e) {
      if (mine === this.seq && !isAbort(e)) this.error = problemOrSignOut(e, this.onUnauthorized);
    }
  }

  /** The search box changed: ask a moment after the last key. */
  search(q: string, delayMs = SEARCH_DEBOUNCE_MS): void {
    this.query = q;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.load(), delayMs);
  }

  /** A conversation was created or changed (an answer to this window's own request). */
  noteConversation(c: Conversation): void {
    if (!this.items || this.shownQuery !== '') return;
    this.items = placeSummary(this.items, { id: c.id, title: c.title, model: c.model, created_at_ms: c.created_at_ms, updated_at_ms: c.updated_at_ms, snippet: null });
  }

  /** A message event: its conversation moves up; an unknown one (or a finished reply, which may
   *  have given the conversation a title) has the list read again. */
  noteMessage(m: ChatMessage): void {
    if (!this.items || this.shownQuery !== '') return;
    const held = this.items.find((x) => x.id === m.conversation_id);
    if (!held || m.status !== 'streaming') {
      this.refreshSoon();
      return;
    }
    if (m.created_at_ms > held.updated_at_ms) this.items = placeSummary(this.items, { ...held, updated_at_ms: m.created_at_ms });
  }

  private refreshSoon(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => void this.load(), 500);
  }

  /** The renamed conversation, or null when refused. */
  async rename(id: number, title: string): Promise<Conversation | null> {
    const t = title.trim();
    if (!t || this.busy[id]) return null;
    this.busy = { ...this.busy, [id]: true };
    this.itemError = null;
    try {
      const c = await api.updateConversation(id, { title: t });
      if (this.items) this.items = this.items.map((x) => (x.id === id ? { ...x, title: c.title, updated_at_ms: c.updated_at_ms } : x));
      return c;
    } catch (e) {
      const p = problemOrSignOut(e, this.onUnauthorized);
      if (p) this.itemError = { ...p, id };
      return null;
    } finally {
      this.done(id);
    }
  }

  async remove(id: number): Promise<boolean> {
    if (this.busy[id]) return false;
    this.busy = { ...this.busy, [id]: true };
    this.itemError = null;
    try {
      await api.deleteConversation(id);
      if (this.items) this.items = this.items.filter((x) => x.id !== id);
      return true;
    } catch (e) {
      const p = problemOrSignOut(e, this.onUnauthorized);
      if (p) this.itemError = { ...p, id };
      return false;
    } finally {
      this.done(id);
    }
  }

  private done(id: number): void {
    const { [id]: _, ...rest } = this.busy;
    this.busy = rest;
  }
}

export const chatList = new ChatListState();
