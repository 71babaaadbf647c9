import { describe, expect, it } from 'vitest';
import type { ModelRun } from '../api/types';
import { overallProgress, replaces, stepState } from './steps';

function run(patch: Partial<ModelRun>): ModelRun {
  return {
    id: 1,
    source: { kind: 'hub', repo: 'o/n', quant: 'Q4_K_M' },
    title: 'o/n:Q4_K_M',
    step: 'checking',
    progress: null,
    detail: '',
    download_id: null,
    profile: null,
    created_profile: false,
    model: null,
    placement: null,
    error: null,
    fix: null,
    notes: [],
    started_ms: 0,
    ended_ms: null,
    ...patch,
  };
}

describe('one-click run steps', () => {
  it('marks the steps before the current one done', () => {
    const r = run({ step: 'loading', progress: 0.5 });
    expect(stepState(r, 'downloading')).toBe('done');
    expect(stepState(r, 'loading')).toBe('now');
    expect(stepState(r, 'ready')).toBe('todo');
  });

  it('a failed run stops where it got to, nothing under way', () => {
    const refused = run({ step: 'failed', error: 'does not fit' });
    expect(stepState(refused, 'checking')).toBe('todo');
    const broken = run({ step: 'failed', download_id: 3 });
    expect(stepState(broken, 'checking')).toBe('done');
    expect(stepState(broken, 'downloading')).toBe('todo');
  });

  it('the bar only moves forward across the steps', () => {
    const order = [
      run({ step: 'checking' }),
      run({ step: 'downloading', progress: 0 }),
      run({ step: 'downloading', progress: 1 }),
      run({ step: 'planning' }),
      run({ step: 'starting' }),
      run({ step: 'loading', progress: 0 }),
      run({ step: 'loading', progress: 1 }),
      run({ step: 'ready' }),
    ].map(overallProgress);
    for (let i = 1; i < order.length; i++) expect(order[i]).toBeGreaterThanOrEqual(order[i - 1] ?? 0);
    expect(order.at(-1)).toBe(1);
  });

  it('follows the newest run', () => {
    expect(replaces(null, run({ id: 1 }))).toBe(true);
    expect(replaces(run({ id: 2 }), run({ id: 1 }))).toBe(false);
    expect(replaces(run({ id: 2 }), run({ id: 3 }))).toBe(true);
  });
});
