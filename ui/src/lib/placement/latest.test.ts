// Debounced, cancellable plan requests: only the newest answer is shown.

import { describe, expect, it } from 'vitest';
import { LatestRequest } from './latest';

class Timers {
  private next = 1;
  pending = new Map<number, () => void>();
  set = (fn: () => void): number => {
    const id = this.next++;
    this.pending.set(id, fn);
    return id;
  };
  clear = (h: unknown): void => {
    this.pending.delete(h as number);
  };
  fire(): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    all.forEach((f) => f());
  }
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const flush = () => new Promise<void>((r) => setTimeout(r, 0));

function setup() {
  const timers = new Timers();
  const calls: { req: number; signal: AbortSignal; d: ReturnType<typeof deferred<string>> }[] = [];
  const results: string[] = [];
  const errors: unknown[] = [];
  const busy: boolean[] = [];
  const runner = new LatestRequest<number, string>({
    fetch: (req, signal) => {
      const d = deferred<string>();
      calls.push({ req, signal, d });
      return d.promise;
    },
    onResult: (r) => results.push(r),
    onError: (e) => errors.push(e),
    onBusy: (b) => busy.push(b),
    setTimer: timers.set,
    clearTimer: timers.clear,
  });
  return { timers, calls, results, errors, busy, runner };
}

describe('LatestRequest', () => {
  it('debounces a burst of changes into one request for the last', async () => {
    const { timers, calls, results, runner } = setup();
    runner.schedule(1);
    runner.schedule(2);
    runner.schedule(3);
    expect(timers.pending.size).toBe(1);
    timers.fire();
    expect(calls.map((c) => c.req)).toEqual([3]);
    calls[0]!.d.resolve('plan 3');
    await flush();
    expect(results).toEqual(['plan 3']);
  });

  it('aborts a running request when a newer change comes and drops its late answer', async () => {
    const { timers, calls, results, runner } = setup();
    runner.schedule(1);
    timers.fire();
    runner.schedule(2);
    expect(calls[0]!.signal.aborted).toBe(true);
    timers.fire();
    calls[1]!.d.resolve('plan 2');
    calls[0]!.d.resolve('plan 1 (late)');
    await flush();
    expect(results).toEqual(['plan 2']);
  });

  it('runs a button press at once, replacing a pending change', async () => {
    const { timers, calls, results, busy, runner } = setup();
    runner.schedule(1);
    const done = runner.run(9);
    expect(timers.pending.size).toBe(0);
    expect(calls.map((c) => c.req)).toEqual([9]);
    calls[0]!.d.resolve('auto');
    await done;
    expect(results).toEqual(['auto']);
    expect(busy.at(-1)).toBe(false);
  });

  it('reports errors of the newest request only, never an abort', async () => {
    const { timers, calls, errors, runner } = setup();
    runner.schedule(1);
    timers.fire();
    runner.schedule(2);
    calls[0]!.d.reject(Object.assign(new Error('aborted'), { name: 'AbortError' }));
    timers.fire();
    calls[1]!.d.reject(new Error('bad_placement'));
    await flush();
    expect(errors).toHaveLength(1);
    expect((errors[0] as Error).message).toBe('bad_placement');
  });
});
