// The dry run in the background: a burst of plans asks once (for the last), the same plan is not
// asked again, an answer for an older plan is dropped, another model clears the table at once,
// and a refused request is shown, not thrown.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { DryRunRequest, DryRunResponse } from '../api/types';

interface Call {
  body: DryRunRequest;
  signal: AbortSignal | undefined;
  resolve: (r: DryRunResponse) => void;
  reject: (e: unknown) => void;
}
const calls: Call[] = [];

vi.mock('../api/client', async (orig) => {
  const real = await orig<typeof import('../api/client')>();
  return {
    ...real,
    api: {
      dryRun: (body: DryRunRequest, signal?: AbortSignal) =>
        new Promise<DryRunResponse>((resolve, reject) => calls.push({ body, signal, resolve, reject })),
    },
  };
});

const { DryRunCheck, DRY_RUN_DEBOUNCE_MS } = await import('./dryRun.svelte');
const { ApiError } = await import('../api/client');

class Timers {
  private next = 1;
  pending = new Map<number, { fn: () => void; ms: number }>();
  setTimer = (fn: () => void, ms: number): number => {
    const id = this.next++;
    this.pending.set(id, { fn, ms });
    return id;
  };
  clearTimer = (h: unknown): void => {
    this.pending.delete(h as number);
  };
  fire(): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    all.forEach((t) => t.fn());
  }
}

const flush = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

const body = (context: number, model = '/m/x.gguf', rig = 'live'): DryRunRequest => ({ model, rig, options: { context } });

const answer = (tag: string): DryRunResponse => ({ build: { id: 1, version: tag, backend: 'cpu' }, dry_run: null, devices: [], error: null });

function setup() {
  const timers = new Timers();
  const signedOut = vi.fn();
  const check = new DryRunCheck(signedOut, { setTimer: timers.setTimer, clearTimer: timers.clearTimer });
  return { timers, check, signedOut };
}

/** A check showing llama.cpp's answer ('first') for a 4096-token plan. */
async function showingFirst() {
  const t = setup();
  t.check.follow(body(4096));
  t.timers.fire();
  calls[0]!.resolve(answer('first'));
  await flush();
  return t;
}

beforeEach(() => {
  calls.length = 0;
});

describe('DryRunCheck', () => {
  it('waits for a pause in the changes, then asks once for the last plan', async () => {
    const { timers, check } = setup();
    check.follow(body(4096));
    check.follow(body(8192));
    expect(check.busy).toBe(true);
    expect(calls).toHaveLength(0);
    expect([...timers.pending.values()].map((t) => t.ms)).toEqual([DRY_RUN_DEBOUNCE_MS]);
    timers.fire();
    expect(calls.map((c) => c.body.options?.context)).toEqual([8192]);
    calls[0]!.resolve(answer('b1'));
    await flush();
    expect(check.result?.build?.version).toBe('b1');
    expect(check.busy).toBe(false);
  });

  it('does not ask again for the plan it already asked about', () => {
    const { timers, check } = setup();
    check.follow(body(4096));
    timers.fire();
    check.follow(body(4096));
    expect(timers.pending.size).toBe(0);
    expect(calls).toHaveLength(1);
  });

  it('drops the answer for an older plan and keeps the table while the new one is checked', async () => {
    const { timers, check } = await showingFirst();
    check.follow(body(8192));
    timers.fire();
    check.follow(body(16384));
    expect(calls[1]!.signal?.aborted).toBe(true);
    // The same model and rig: the last table stays (dimmed by the page) until the new answer.
    expect(check.result?.build?.version).toBe('first');
    timers.fire();
    calls[1]!.resolve(answer('late'));
    calls[2]!.resolve(answer('newest'));
    await flush();
    expect(check.result?.build?.version).toBe('newest');
  });

  it('clears the table at once for another model or rig', async () => {
    const { check } = await showingFirst();
    check.follow(body(4096, '/m/x.gguf', 'cpu-minipc'));
    expect(check.result).toBeNull();
    expect(check.busy).toBe(true);
  });

  it('shows a refused request as an error, and signs out on 401', async () => {
    const { timers, check, signedOut } = setup();
    check.follow(body(4096));
    timers.fire();
    calls[0]!.reject(new ApiError(422, 'bad_model', 'not a GGUF file'));
    await flush();
    expect(check.error).toEqual({ code: 'bad_model', message: 'not a GGUF file' });
    expect(check.busy).toBe(false);
    check.follow(body(8192));
    timers.fire();
    calls[1]!.reject(new ApiError(401, 'unauthorized', 'sign in'));
    await flush();
    expect(signedOut).toHaveBeenCalledOnce();
  });

  it('stops with the page and asks again on the next visit, keeping the last table', async () => {
    const { timers, check } = await showingFirst();
    check.follow(body(8192));
    timers.fire();
    check.dispose();
    expect(calls[1]!.signal?.aborted).toBe(true);
    expect(check.busy).toBe(false);
    check.follow(body(8192));
    expect(check.result?.build?.version).toBe('first');
    timers.fire();
    expect(calls).toHaveLength(3);
  });

  it('forgets everything when there is no plan', async () => {
    const { check } = await showingFirst();
    check.follow(null);
    expect(check.result).toBeNull();
    expect(check.busy).toBe(false);
  });
});
