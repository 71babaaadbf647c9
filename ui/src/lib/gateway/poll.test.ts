// Polling while visible: now, then every interval after the previous call ends; paused while the
// tab is hidden, at once when it comes back; stopped for good by its stop function.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { poll, type Visibility } from './poll';

function fakeVisibility(hidden = false) {
  const listeners = new Set<() => void>();
  const v: Visibility & { set(h: boolean): void; listeners: Set<() => void> } = {
    hidden: () => hidden,
    onChange: (fn) => {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    set(h: boolean) {
      hidden = h;
      listeners.forEach((fn) => fn());
    },
    listeners,
  };
  return v;
}

describe('poll', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('asks now and then every interval', async () => {
    const tick = vi.fn(async () => {});
    const stop = poll(tick, 1000, fakeVisibility());
    expect(tick).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(999);
    expect(tick).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(tick).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(3000);
    expect(tick).toHaveBeenCalledTimes(5);
    stop();
    await vi.advanceTimersByTimeAsync(5000);
    expect(tick).toHaveBeenCalledTimes(5);
  });

  it('waits for a slow call before counting the next interval', async () => {
    let finish: () => void = () => {};
    const tick = vi.fn(() => new Promise<void>((r) => (finish = r)));
    const stop = poll(tick, 1000, fakeVisibility());
    await vi.advanceTimersByTimeAsync(5000);
    expect(tick).toHaveBeenCalledTimes(1);
    finish();
    await vi.advanceTimersByTimeAsync(1000);
    expect(tick).toHaveBeenCalledTimes(2);
    stop();
  });

  it('goes on after a failed call', async () => {
    const tick = vi.fn(async () => {
      throw new Error('down');
    });
    const stop = poll(tick, 1000, fakeVisibility());
    await vi.advanceTimersByTimeAsync(2000);
    expect(tick).toHaveBeenCalledTimes(3);
    stop();
  });

  it('pauses while hidden and asks at once when visible again', async () => {
    const tick = vi.fn(async () => {});
    const vis = fakeVisibility(true);
    const stop = poll(tick, 1000, vis);
    await vi.advanceTimersByTimeAsync(5000);
    expect(tick).not.toHaveBeenCalled();
    vis.set(false);
    expect(tick).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(1000);
    expect(tick).toHaveBeenCalledTimes(2);
    vis.set(true);
    await vi.advanceTimersByTimeAsync(5000);
    expect(tick).toHaveBeenCalledTimes(2);
    stop();
    expect(vis.listeners.size).toBe(0);
    vis.set(false);
    expect(tick).toHaveBeenCalledTimes(2);
  });
});
