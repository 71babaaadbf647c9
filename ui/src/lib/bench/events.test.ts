// The `bench.run` event as the event stream reads it.

import { describe, expect, it } from 'vitest';
import { parseServerMessage } from '../api/events';
import { probeSummary, summary } from '../../test/bench';

describe('bench.run events', () => {
  it('carry a run’s list entry', () => {
    const run = summary(7, { status: 'running', runs_done: 3 });
    const r = parseServerMessage(JSON.stringify({ type: 'bench.run', data: run }));
    expect(r).toEqual({ ok: true, event: { type: 'bench.run', data: run } });
  });
  it('carry a quality probe’s entry, its passes so far with it', () => {
    const run = probeSummary(8, undefined, { status: 'running', finished_at_ms: null });
    const r = parseServerMessage(JSON.stringify({ type: 'bench.run', data: run }));
    expect(r).toEqual({ ok: true, event: { type: 'bench.run', data: run } });
  });
  it('without id, status or steps are refused, not fatal', () => {
    const r = parseServerMessage(JSON.stringify({ type: 'bench.run', data: { id: 7, status: 'running' } }));
    expect(r).toEqual({ ok: false, error: 'bench.run needs id, status and steps' });
  });
});
