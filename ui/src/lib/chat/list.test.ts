// The sidebar list: a changed conversation moves to the top, keeping its search snippet.

import { describe, expect, it } from 'vitest';
import { T0 } from '../../test/chat';
import type { ConversationSummary } from '../api/types';
import { placeSummary } from './list.svelte';

const item = (id: number, at: number, extra: Partial<ConversationSummary> = {}): ConversationSummary => ({
  id,
  title: `c${id}`,
  model: 'tiny',
  created_at_ms: T0,
  updated_at_ms: T0 + at,
  snippet: null,
  ...extra,
});

describe('placeSummary', () => {
  it('puts a new conversation first', () => {
    expect(placeSummary([item(1, 10), item(2, 5)], item(3, 20)).map((x) => x.id)).toEqual([3, 1, 2]);
  });
  it('moves a changed one up and keeps its snippet', () => {
    const out = placeSummary([item(1, 10), item(2, 5, { snippet: 'kv cache' })], item(2, 30, { title: 'Renamed' }));
    expect(out.map((x) => x.id)).toEqual([2, 1]);
    expect(out[0]).toMatchObject({ title: 'Renamed', snippet: 'kv cache' });
  });
});
