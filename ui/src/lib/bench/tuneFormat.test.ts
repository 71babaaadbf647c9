// How a tuning reads: the values a trial changed, its figure with the objective's unit, outcomes
// and verdicts as chips, where it stands, the gain, the spec in words and the per-trial lines.

import { describe, expect, it } from 'vitest';
import { stats } from '../../test/bench';
import { trial, tuneView } from '../../test/tune';
import {
  describeValues,
  formatGain,
  knobText,
  objectiveLabel,
  objectiveText,
  objectiveUnit,
  outcomeChip,
  trialSeries,
  tuneProgress,
  tuneSpecText,
  verdictChip,
  floorText,
  kldNote,
  trialKldText,
  bestFloorText,
} from './tuneFormat';
import type { TrialKld } from './types';

describe('a trial’s values', () => {
  it('are "as saved" for the baseline, else name=value in name order', () => {
    expect(describeValues({})).toBe('as saved');
    expect(describeValues({ ubatch: '256', threads: '8' })).toBe('threads=8, ubatch=256');
    expect(describeValues({ tensor_split: '3,1' })).toBe('tensor_split=3,1');
  });
  it('say when a flag is given alone', () => {
    expect(describeValues({ '--no-mmap': '' })).toBe('--no-mmap (switch)');
  });
});

describe('the objective', () => {
  it('has its unit and its direction', () => {
    expect(objectiveUnit('aggregate_tps')).toBe('tok/s');
    expect(objectiveUnit(undefined)).toBe('tok/s');
    expect(objectiveUnit('ttft_ms')).toBe('ms');
    expect(objectiveLabel('ttft_ms')).toMatch(/lower is better/);
  });
  it('reads median ± stdev with the unit', () => {
    const s = { ...stats([190, 193, 196]), median: 192.94, stdev: 8.53 };
    expect(objectiveText(s, 'aggregate_tps')).toBe('193 ± 8.5 tok/s');
    expect(objectiveText({ ...s, median: 84.2, stdev: 3.04 }, 'ttft_ms')).toBe('84.2 ± 3.0 ms');
    expect(objectiveText(null, 'ttft_ms')).toBe('—');
  });
});

describe('chips', () => {
  it('mark out of memory and crashes', () => {
    expect(outcomeChip('out_of_memory')).toEqual({ label: 'out of memory', tone: 'bad' });
    expect(outcomeChip('crashed')).toEqual({ label: 'crashed', tone: 'bad' });
    expect(outcomeChip('measured')).toEqual({ label: 'measured', tone: '' });
    expect(outcomeChip('running').tone).toBe('info');
    expect(outcomeChip('cancelled').tone).toBe('warn');
  });
  it('give each verdict its badge', () => {
    expect(verdictChip('better')).toEqual({ label: 'better', tone: 'ok' });
    expect(verdictChip('within_noise')).toEqual({ label: 'within noise', tone: 'info' });
    expect(verdictChip('worse').tone).toBe('warn');
    expect(verdictChip('failed').tone).toBe('bad');
    expect(verdictChip('baseline')).toEqual({ label: 'baseline', tone: '' });
    expect(verdictChip('newer').label).toBe('newer');
  });
});

describe('where a tuning stands', () => {
  it('is the trial in progress of those planned while it runs', () => {
    const running = tuneView(1, { status: 'running', trials: [trial(0, {}, [1, 2, 3]), trial(1, { ubatch: '64' }, null, { outcome: 'running', decision: null })], trials_planned: 3 });
    expect(tuneProgress(running)).toBe('trial 2 of ≤ 3');
    expect(tuneProgress({ ...running, trials: [] })).toBe('trial 1 of ≤ 3');
  });
  it('is the trials run after', () => {
    expect(tuneProgress(tuneView(1))).toBe('3 trials');
    expect(tuneProgress(tuneView(1, { trials: [trial(0, {}, [1, 2, 3])] }))).toBe('1 trial');
  });
  it('gains are signed', () => {
    expect(formatGain(12.345)).toBe('+12.3 %');
    expect(formatGain(-0.44)).toBe('−0.4 %');
    expect(formatGain(null)).toBe('—');
  });
});

describe('the spec in words', () => {
  it('names the knobs, the search, the objective and the workload point', () => {
    expect(knobText({ name: 'ubatch', values: ['64', '128'], range: null })).toBe('ubatch 64, 128');
    expect(knobText({ name: 'threads', range: { from: 2, to: 8, step: 2 } })).toBe('threads 2–8 step 2');
    expect(tuneSpecText(tuneView(1).spec)).toBe('grid over ubatch 64, 128 by aggregate output tok/s, at 32:16, 1 stream, 3 warm runs per trial');
    expect(tuneSpecText({ knobs: [{ name: 'threads', values: [4] }] })).toBe('walk over threads 4 by aggregate output tok/s, at 512:128, 1 stream, 5 warm runs per trial');
  });
});

describe('the per-trial chart', () => {
  it('draws the median with p10 and p90, gaps where nothing was measured', () => {
    const trials = [trial(0, {}, [10, 20, 30]), trial(1, { ubatch: '64' }, null, { outcome: 'out_of_memory' })];
    const d = trialSeries(trials);
    expect(d.x).toEqual([1, 2]);
    expect(d.series.map((s) => [s.label, s.dashed ?? false])).toEqual([
      ['median', false],
      ['p10', true],
      ['p90', true],
    ]);
    expect(d.series[0]!.values).toEqual([20, null]);
    expect(d.series[1]!.values).toEqual([12, null]);
    expect(d.series[2]!.values).toEqual([28, null]);
  });
});

describe('the quality floor', () => {
  const kld = (extra: Partial<TrialKld> = {}): TrialKld => ({ mean: 0.000421, mean_unc: 0.000012, same_top: 0.9912, run_id: 7, same_numerics_as: null, bound: 0.01, within: true, ...extra });
  it('marks a trial over it', () => {
    expect(verdictChip('broke_floor')).toEqual({ label: 'over the floor', tone: 'bad' });
  });
  it('reads a trial’s KLD with its uncertainty and top-token share', () => {
    expect(trialKldText(kld())).toBe('0.000421 ± 0.000012');
    expect(trialKldText(null)).toBe('—');
    expect(kldNote(kld())).toBe('top token 99.1 %');
    expect(kldNote(kld({ same_numerics_as: 0 }))).toBe('top token 99.1 % · KLD of trial 1: same numerics');
    expect(kldNote(kld({ within: false, mean: 0.132, mean_unc: 0.008 }))).toBe('top token 99.1 % · over the bound 0.0100');
  });
  it('says what it is in the spec and for the best', () => {
    expect(floorText(undefined)).toBeNull();
    expect(floorText({ reference: 'ref-1', max_mean_kld: 0.01 })).toBe('mean KLD ≤ 0.0100 against reference ref-1');
    expect(floorText({ reference: 'ref-1', max_mean_kld: null })).toBe('no worse than the profile as saved against reference ref-1');
    const spec = { ...tuneView(1).spec, quality_floor: { reference: 'ref-1', max_mean_kld: 0.01 } };
    expect(tuneSpecText(spec)).toMatch(/per trial; quality floor: mean KLD ≤ 0\.0100 against reference ref-1$/);
    expect(bestFloorText(kld())).toBe('Respects the quality floor: mean KLD 0.000421 ± 0.000012 ≤ bound 0.0100.');
    expect(bestFloorText(null)).toBeNull();
  });
});
