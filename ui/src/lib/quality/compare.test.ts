// Two KLD runs compared figure by figure: the differences and whether the ± ranges overlap.

import { describe, expect, it } from 'vitest';
import { kld } from '../../test/quality';
import { compareKld, kldVerdict } from './compare';

describe('comparing two KLD runs', () => {
  const q8 = kld({ mean: 0.0021, mean_unc: 0.0001, same_top: 0.991, same_top_unc: 0.001, ppl_ratio: 1.001, ppl_ratio_unc: 0.0002 });
  const q4 = kld({ mean: 0.0452, mean_unc: 0.0012, same_top: 0.934, same_top_unc: 0.002, ppl_ratio: 1.0213, ppl_ratio_unc: 0.0009 });

  it('sets each figure side by side with the difference in its unit', () => {
    const rows = compareKld(q8, q4);
    expect(rows.map((r) => r.key)).toEqual(['mean', 'p99', 'max', 'same_top', 'rms_dp', 'ppl_ratio']);
    const mean = rows.find((r) => r.key === 'mean')!;
    expect(mean).toMatchObject({ base: '0.00210 ± 0.00010', other: '0.0452 ± 0.0012', diff: '+0.0431', overlap: false });
    const top = rows.find((r) => r.key === 'same_top')!;
    expect(top).toMatchObject({ base: '99.1 ± 0.1 %', other: '93.4 ± 0.2 %', diff: '−5.7 pts', overlap: false });
    expect(rows.find((r) => r.key === 'ppl_ratio')!.diff).toBe('+0.0203');
  });

  it('has no overlap verdict for figures without an uncertainty', () => {
    const rows = compareKld(q8, q4);
    expect(rows.find((r) => r.key === 'p99')!.overlap).toBeNull();
    expect(rows.find((r) => r.key === 'max')!.diff).toBe('0');
  });

  it('says when the runs cannot be told apart, and which is closer when they can', () => {
    const near = kld({ mean: 0.0022, mean_unc: 0.0002 });
    expect(compareKld(q8, near).find((r) => r.key === 'mean')!.overlap).toBe(true);
    expect(kldVerdict(q8, near)).toMatch(/^Not distinguishable/);
    expect(kldVerdict(q8, q4)).toMatch(/^The first run is closer/);
    expect(kldVerdict(q4, q8)).toMatch(/^The second run is closer/);
  });
});

describe('KLD runs among the picks', () => {
  it('are compared apart from speed runs, with a base of their own', async () => {
    const { summary } = await import('../../test/bench');
    const { compareBases, splitPicks } = await import('../bench/compare');
    const kldRun = (id: number) => summary(id, { kind: 'kld', steps: [], spec: { reference: 'ref1' }, kld: kld() });
    const picks = [kldRun(9), summary(3), kldRun(8), summary(1)];
    const { speed, kld: klds } = splitPicks(picks);
    expect(speed.map((r) => r.id)).toEqual([3, 1]);
    expect(klds.map((r) => r.id)).toEqual([9, 8]);
    expect([...compareBases(picks)].sort()).toEqual([3, 9]);
  });
});
