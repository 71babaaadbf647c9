// Streaming text: deltas at UTF-8 byte offsets, repeats skipped, gaps found; merging a read with
// the copy the events keep.

import { describe, expect, it } from 'vitest';
import { delta, msg } from '../../test/chat';
import { applyDelta, dropUnits, mergeAll, mergeMessage, textUnits, upsertMessage } from './delta';

const streaming = (content = '', reasoning = '') => msg(2, 1, 'assistant', { status: 'streaming', content, reasoning });

describe('text units', () => {
  it('count UTF-16 units, as JavaScript strings and the daemon do', () => {
    expect(textUnits('abc')).toBe(3);
    expect(textUnits('é–')).toBe(2);
    expect(textUnits('😀')).toBe(2);
  });
  it('drop a prefix by units, refusing to cut a surrogate pair', () => {
    expect(dropUnits('héllo', 2)).toBe('llo');
    expect(dropUnits('😀x', 2)).toBe('x');
    expect(dropUnits('😀x', 1)).toBeNull();
    expect(dropUnits('abc', 0)).toBe('abc');
    expect(dropUnits('abc', 4)).toBeNull();
  });
});

describe('applyDelta', () => {
  it('appends text at the end of the copy', () => {
    const r = applyDelta(streaming('Hel'), delta(2, 3, 'lo'));
    expect(r.kind === 'applied' && r.message.content).toBe('Hello');
  });
  it('appends reasoning and content each at its own offset', () => {
    const r = applyDelta(streaming('', 'thinking'), delta(2, 0, 'A', { reasoning_offset: 8, reasoning: ' more' }));
    expect(r.kind === 'applied' && [r.message.reasoning, r.message.content]).toEqual(['thinking more', 'A']);
  });
  it('counts offsets in UTF-16 units', () => {
    const r = applyDelta(streaming('GPU 2–3 😀'), delta(2, 10, ' ok'));
    expect(r.kind === 'applied' && r.message.content).toBe('GPU 2–3 😀 ok');
  });
  it('skips a delta already held', () => {
    expect(applyDelta(streaming('Hello'), delta(2, 3, 'lo')).kind).toBe('same');
    expect(applyDelta(streaming('Hello'), delta(2, 5, '')).kind).toBe('same');
  });
  it('takes only the new tail of a delta that overlaps the copy', () => {
    const r = applyDelta(streaming('Hello'), delta(2, 3, 'lo world'));
    expect(r.kind === 'applied' && r.message.content).toBe('Hello world');
  });
  it('finds a gap', () => {
    expect(applyDelta(streaming('Hel'), delta(2, 5, 'x')).kind).toBe('gap');
    expect(applyDelta(streaming('Hel'), delta(2, 3, 'x', { reasoning_offset: 4, reasoning: 'y' })).kind).toBe('gap');
    // Even an empty delta says the copy is behind.
    expect(applyDelta(streaming('Hel'), delta(2, 7, '')).kind).toBe('gap');
  });
  it('leaves a finished reply alone', () => {
    expect(applyDelta(msg(2, 1, 'assistant', { status: 'stopped', content: 'Hel' }), delta(2, 3, 'lo')).kind).toBe('same');
  });
});

describe('merging', () => {
  it('keeps the longer streaming text (a read older than the events)', () => {
    const held = streaming('Hello wor');
    const read = streaming('Hello');
    expect(mergeMessage(held, read).content).toBe('Hello wor');
    expect(mergeMessage(read, held).content).toBe('Hello wor');
  });
  it('lets a final state win, and never go back to streaming', () => {
    const final = msg(2, 1, 'assistant', { status: 'stopped', content: 'Hel' });
    expect(mergeMessage(streaming('Hello'), final)).toBe(final);
    expect(mergeMessage(final, streaming('Hello'))).toBe(final);
  });
  it('upserts in id order and returns the same list when nothing changed', () => {
    const list = [msg(1, null), msg(3, 2)];
    expect(upsertMessage(list, msg(2, 1)).map((m) => m.id)).toEqual([1, 2, 3]);
    const final = msg(2, 1, 'assistant', { status: 'complete' });
    const withFinal = [final];
    expect(upsertMessage(withFinal, streaming('x'))).toBe(withFinal);
  });
  it('keeps a message newer than a read, dropping one the read no longer has', () => {
    const held = [msg(1, null), streaming('abc'), msg(5, 2)];
    const read = [msg(1, null), streaming('a'), msg(3, 2)];
    const out = mergeAll(held, read);
    expect(out.map((m) => m.id)).toEqual([1, 2, 3, 5]);
    expect(out[1]!.content).toBe('abc');
    expect(mergeAll([msg(1, null), msg(2, 1)], [msg(2, 1)]).map((m) => m.id)).toEqual([2]);
  });
});
