// The estimate of the time a running benchmark or tuning has left.

import { describe, expect, it } from 'vitest';
import { formatTimeLeft, runTimeLeftMs, timeLeftMs, tuneTimeLeftMs } from './timeLeft';

describe('time left', () => {
  it('is the mean time of the pieces done times the pieces left', () => {
    expect(timeLeftMs(4, 10, 40_000)).toBe(60_000);
    expect(timeLeftMs(10, 10, 40_000)).toBe(0);
  });
  it('is unknown before the first piece ends', () => {
    expect(timeLeftMs(0, 10, 5_000)).toBeNull();
    expect(timeLeftMs(3, 0, 5_000)).toBeNull();
  });
  it('of a benchmark counts its runs since it started', () => {
    const run = { status: 'running', runs_done: 2, runs_total: 8, started_at_ms: 1_000 };
    expect(runTimeLeftMs(run, 21_000)).toBe(60_000);
    expect(runTimeLeftMs({ ...run, status: 'done' }, 21_000)).toBeNull();
  });
  it('of a tuning uses its finished trials and takes off what the running one has done', () => {
    const trial = (start: number, end: number | null) => ({ started_at_ms: start, finished_at_ms: end });
    const tune = { status: 'running', trials_planned: 5, trials: [trial(0, 60_000), trial(60_000, 180_000), trial(180_000, null)] };
    // Two finished (90 s on average); the running one 30 s in; two more after it.
    expect(tuneTimeLeftMs(tune, 210_000)).toBe(60_000 + 2 * 90_000);
    expect(tuneTimeLeftMs({ ...tune, trials: [trial(0, null)] }, 10_000)).toBeNull();
  });
  it('reads as a rounded figure', () => {
    expect(formatTimeLeft(null)).toBe('');
    expect(formatTimeLeft(20_000)).toBe('under a minute left');
    expect(formatTimeLeft(150_000)).toBe('about 3 min left');
    expect(formatTimeLeft(2 * 3_600_000 + 5 * 60_000)).toBe('about 2 h 5 min left');
  });
});
