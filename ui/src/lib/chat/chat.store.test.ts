// The chat store: deltas applied as they come, held across a gap until a read fills it, a read
// older than the events never undoing text; a new chat created on first send; branch flips and
// settings saved by PATCH (and put back when refused); a form saving as it goes away does not
// write into the next conversation.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { conversation, delta, msg } from '../../test/chat';
import type { ChatMessage } from '../api/types';
import { pendingCalls, withApi } from '../../test/pending';

const { calls, pending, take, answer } = pendingCalls();

vi.mock('../api/client', (orig) =>
  withApi(orig, {
    chatModels: () => pending('models'),
    conversations: (q: string) => pending('list', q),
    conversation: (id: number) => pending('get', id),
    createConversation: (body: unknown) => pending('create', body),
    updateConversation: (id: number, patch: unknown) => pending('patch', { id, patch }),
    sendMessage: (id: number, body: unknown) => pending('send', { id, body }),
    regenerate: (id: number) => pending('regenerate', id),
    stopMessage: (id: number) => pending('stop', id),
  }),
);

const { ChatState: Store } = await import('./chat.svelte');
/** Every store made, so that each test's pending reads are cancelled at its end. */
const made: InstanceType<typeof Store>[] = [];
class ChatState extends Store {
  constructor() {
    super();
    made.push(this);
  }
}
const { ApiError } = await import('../api/client');

const streaming = (id: number, parent: number, content = '') => msg(id, parent, 'assistant', { status: 'streaming', content });

/** A store showing conversation 1 with these messages. */
async function opened(messages: ChatMessage[], conv = conversation()) {
  const s = new ChatState();
  s.open(1);
  await answer('get', { conversation: conv, messages });
  return s;
}

describe('the chat store', () => {
  beforeEach(() => {
    calls.length = 0;
  });
  afterEach(() => {
    for (const s of made.splice(0)) s.open(null);
    vi.useRealTimers();
  });

  it('streams deltas into the reply and keeps the live numbers', async () => {
    const s = await opened([msg(1, null), streaming(2, 1)]);
    s.ingestDelta(delta(2, 0, 'Hel', { completion_tokens: 1, elapsed_ms: 400, status_line: null }));
    s.ingestDelta(delta(2, 3, 'lo', { completion_tokens: 2, elapsed_ms: 800 }));
    expect(s.path.at(-1)!.content).toBe('Hello');
    expect(s.live[2]!.completionTokens).toBe(2);
    expect(s.streaming?.id).toBe(2);
  });

  it('ignores deltas of another conversation', async () => {
    const s = await opened([msg(1, null), streaming(2, 1)]);
    s.ingestDelta({ ...delta(2, 0, 'x'), conversation_id: 9 });
    expect(s.path.at(-1)!.content).toBe('');
  });

  it('holds deltas across a gap and reads the conversation again', async () => {
    vi.useFakeTimers();
    const s = new ChatState();
    s.open(1);
    await vi.waitFor(() => expect(calls.some((c) => c.name === 'get')).toBe(true));
    take('get').resolve({ conversation: conversation(), messages: [msg(1, null), streaming(2, 1, 'ab')] });
    await vi.advanceTimersByTimeAsync(0);
    // "cd" was dropped; "ef" and "gh" wait.
    s.ingestDelta(delta(2, 4, 'ef'));
    s.ingestDelta(delta(2, 6, 'gh'));
    expect(s.messages[1]!.content).toBe('ab');
    await vi.advanceTimersByTimeAsync(1100);
    // The read has "abcd" (saved before the drop was noticed): the held deltas fit after it.
    take('get').resolve({ conversation: conversation(), messages: [msg(1, null), streaming(2, 1, 'abcd')] });
    await vi.advanceTimersByTimeAsync(0);
    expect(s.messages[1]!.content).toBe('abcdefgh');
  });

  it('a read older than the events does not undo text; a final message brings it all', async () => {
    vi.useFakeTimers();
    const s = new ChatState();
    s.open(1);
    take('get').resolve({ conversation: conversation(), messages: [msg(1, null), streaming(2, 1)] });
    await vi.advanceTimersByTimeAsync(0);
    s.ingestDelta(delta(2, 0, 'Hello'));
    s.resync();
    await vi.advanceTimersByTimeAsync(1100);
    take('get').resolve({ conversation: conversation(), messages: [msg(1, null), streaming(2, 1, 'He')] });
    await vi.advanceTimersByTimeAsync(0);
    expect(s.messages[1]!.content).toBe('Hello');
    s.ingestMessage(msg(2, 1, 'assistant', { status: 'complete', content: 'Hello world' }));
    expect(s.messages[1]!.content).toBe('Hello world');
    // A late delta of a finished reply changes nothing.
    s.ingestDelta(delta(2, 5, '!!'));
    expect(s.messages[1]!.content).toBe('Hello world');
  });

  it('applies deltas that came before the reply was known, once it is', async () => {
    const s = await opened([msg(1, null), msg(2, 1)]);
    s.ingestDelta(delta(4, 0, 'Hi'));
    s.ingestMessage(msg(3, 2, 'user'));
    s.ingestMessage(streaming(4, 3));
    expect(s.path.map((m) => m.id)).toEqual([1, 2, 3, 4]);
    expect(s.path.at(-1)!.content).toBe('Hi');
  });

  it('creates a new chat on the first send, with the draft’s settings and a title', async () => {
    const s = new ChatState();
    s.open(null);
    await s.updateSettings(null, { model: 'tiny', system_prompt: 'Be brief.', params: { max_tokens: 64 } });
    const sending = s.send('Hello there\nmore', []);
    const create = await answer('create', conversation({ id: 7 }));
    expect(create.arg).toEqual({ model: 'tiny', title: 'Hello there', system_prompt: 'Be brief.', params: { max_tokens: 64 } });
    expect(s.conversationId).toBe(7);
    const send = take('send');
    expect(send.arg).toEqual({ id: 7, body: { parent_id: null, content: 'Hello there\nmore' } });
    send.resolve({ user: { ...msg(1, null), conversation_id: 7 }, assistant: { ...streaming(2, 1), conversation_id: 7 } });
    expect(await sending).toBe(true);
    expect(s.path.map((m) => m.id)).toEqual([1, 2]);
    // Opening the conversation just made reads nothing.
    s.open(7);
    expect(calls.some((c) => c.name === 'get')).toBe(false);
  });

  it('keeps the text when a send is refused, with the daemon’s message', async () => {
    const s = await opened([msg(1, null), msg(2, 1)]);
    const sending = s.send('again', []);
    const c = take('send');
    expect((c.arg as { body: { parent_id: number } }).body.parent_id).toBe(2);
    c.reject(new ApiError(503, 'model_unavailable', 'tiny is not running'));
    expect(await sending).toBe(false);
    expect(s.actionError).toEqual({ code: 'model_unavailable', message: 'tiny is not running' });
  });

  it('says what a refusal as too large means', async () => {
    const s = await opened([msg(1, null), msg(2, 1)]);
    const sending = s.send('look', ['data:image/png;base64,AAAA']);
    take('send').reject(new ApiError(413, 'http_413', 'Failed to buffer the request body: length limit exceeded'));
    expect(await sending).toBe(false);
    expect(s.actionError?.message).toMatch(/too large .*attach fewer or smaller images/);
  });

  it('an edit posts a sibling of the user message', async () => {
    const s = await opened([msg(1, null), msg(2, 1), msg(3, 2), msg(4, 3)]);
    const editing = s.edit(s.messages[2]!, 'better');
    const c = take('send');
    expect(c.arg).toEqual({ id: 1, body: { parent_id: 2, content: 'better' } });
    c.resolve({ user: msg(5, 2, 'user'), assistant: streaming(6, 5) });
    expect(await editing).toBe(true);
    expect(s.path.map((m) => m.id)).toEqual([1, 2, 5, 6]);
  });

  it('a regenerated reply is shown, moving a chosen leaf to it', async () => {
    const s = await opened([msg(1, null), msg(2, 1), msg(3, 1, 'assistant')], conversation({ active_leaf: 2 }));
    expect(s.path.map((m) => m.id)).toEqual([1, 2]);
    const regenerating = s.regenerate(s.messages[1]!);
    expect(s.busy[2]).toBe('regenerate');
    await answer('regenerate', { assistant: streaming(4, 1) });
    const p = take('patch');
    expect(p.arg).toEqual({ id: 1, patch: { active_leaf: 4 } });
    expect(s.path.map((m) => m.id)).toEqual([1, 4]);
    p.resolve(conversation({ active_leaf: 4 }));
    await regenerating;
    expect(s.busy[2]).toBeUndefined();
  });

  it('flips to the newest leaf under a sibling, and back when refused', async () => {
    const s = await opened([msg(1, null), msg(2, 1), msg(3, 2), msg(4, 3), msg(5, 1, 'assistant')]);
    expect(s.path.map((m) => m.id)).toEqual([1, 5]);
    const flipping = s.flip(2);
    expect(s.path.map((m) => m.id)).toEqual([1, 2, 3, 4]);
    const p = take('patch');
    expect(p.arg).toEqual({ id: 1, patch: { active_leaf: 4 } });
    p.reject(new ApiError(500, 'internal', 'disk full'));
    await flipping;
    expect(s.path.map((m) => m.id)).toEqual([1, 5]);
    expect(s.actionError?.message).toBe('disk full');
  });

  it('stop takes the stopped reply from the answer', async () => {
    const s = await opened([msg(1, null), streaming(2, 1, 'part')]);
    const stopping = s.stop(s.messages[1]!);
    await answer('stop', msg(2, 1, 'assistant', { status: 'stopped', content: 'partial' }));
    await stopping;
    expect(s.messages[1]).toMatchObject({ status: 'stopped', content: 'partial' });
    expect(s.streaming).toBeNull();
  });

  it('saves settings into the conversation open, never into another', async () => {
    const s = await opened([msg(1, null)]);
    expect(await s.updateSettings(2, { params: { reasoning: 'off' } })).toBe(false);
    expect(calls).toEqual([]);
    const saving = s.updateSettings(1, { params: { reasoning: 'off' } });
    expect(s.params.reasoning).toBe('off');
    const p = take('patch');
    expect(p.arg).toEqual({ id: 1, patch: { params: { reasoning: 'off' } } });
    p.resolve(conversation({ params: { reasoning: 'off' } }));
    expect(await saving).toBe(true);
  });
});
