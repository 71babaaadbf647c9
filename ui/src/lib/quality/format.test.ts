// How KL divergences, shares and their uncertainties, a reference's windows and state, and the
// estimate before recording are written.

import { describe, expect, it } from 'vitest';
import { estimate, kld, reference } from '../../test/quality';
import {
  budgetLeft,
  corpusText,
  estimateText,
  fitsBudget,
  formatKld,
  formatKldWithUnc,
  formatPplRatio,
  formatShare,
  formatShareWithUnc,
  intervalsOverlap,
  kldAxisLabels,
  kldHeadline,
  referenceStateText,
  windowsText,
} from './format';

describe('KL divergences', () => {
  it('keep three significant digits however small', () => {
    expect(formatKld(0.012345)).toBe('0.0123');
    expect(formatKld(0.00012345)).toBe('0.000123');
    expect(formatKld(0.5)).toBe('0.500');
    expect(formatKld(1.5)).toBe('1.500');
    expect(formatKld(0)).toBe('0');
    expect(formatKld(-0.0000123)).toBe('-0.000012');
    expect(formatKld(null)).toBe('—');
  });
  it('write the uncertainty at the figure’s decimals', () => {
    expect(formatKldWithUnc(0.0123, 0.0004)).toBe('0.0123 ± 0.0004');
    expect(formatKldWithUnc(0.000123, 0.000031)).toBe('0.000123 ± 0.000031');
    expect(formatKldWithUnc(0, 0.00002)).toBe('0.000000 ± 0.000020');
    expect(formatKldWithUnc(0.2, null)).toBe('0.200');
  });
});

describe('a KLD axis', () => {
  it('labels its ticks at the decimals their spacing needs', () => {
    expect(kldAxisLabels([0, 2e-7, 4e-7, 6e-7])).toEqual(['0', '0.0000002', '0.0000004', '0.0000006']);
    expect(kldAxisLabels([0, 0.01, 0.02])).toEqual(['0', '0.01', '0.02']);
    expect(kldAxisLabels([0, 0.025, 0.05])).toEqual(['0', '0.025', '0.050']);
    expect(kldAxisLabels([0, 0.5, 1, 1.5])).toEqual(['0', '0.5', '1.0', '1.5']);
    expect(kldAxisLabels([0.3])).toEqual(['0.3']);
    expect(new Set(kldAxisLabels([0.000001, 0.0000012, 0.0000014])).size).toBe(3);
  });
});

describe('shares', () => {
  it('are percentages with one decimal', () => {
    expect(formatShare(0.9912)).toBe('99.1 %');
    expect(formatShare(1)).toBe('100.0 %');
    expect(formatShare(undefined)).toBe('—');
  });
  it('carry their uncertainty, finer when it is tiny', () => {
    expect(formatShareWithUnc(0.991, 0.002)).toBe('99.1 ± 0.2 %');
    expect(formatShareWithUnc(0.9999, 0.0001)).toBe('99.99 ± 0.01 %');
    expect(formatShareWithUnc(0.749, null)).toBe('74.9 %');
  });
  it('PPL ratios keep four decimals', () => {
    expect(formatPplRatio(1.00987, 0.00041)).toBe('1.0099 ± 0.0004');
    expect(formatPplRatio(null, 0.1)).toBe('—');
  });
});

describe('intervals', () => {
  it('overlap when the gap is within both uncertainties', () => {
    expect(intervalsOverlap(0.01, 0.002, 0.013, 0.002)).toBe(true);
    expect(intervalsOverlap(0.01, 0.001, 0.013, 0.001)).toBe(false);
    expect(intervalsOverlap(0.99, 0.005, 0.93, 0.01)).toBe(false);
  });
});

describe('a KLD run in the list', () => {
  it('reads mean KLD and same top', () => {
    expect(kldHeadline(kld())).toBe('Mean KLD 0.0123 ± 0.0004, same top 99.1 %');
    expect(kldHeadline(null)).toBe('no result yet');
  });
});

describe('references', () => {
  it('name their corpus', () => {
    expect(corpusText({ kind: 'builtin' })).toBe('built-in');
    expect(corpusText({ kind: 'file', path: '/home/u/notes.txt' })).toBe('file notes.txt');
    expect(corpusText({ kind: 'conversations', ids: [3] })).toBe('1 conversation');
    expect(corpusText({ kind: 'conversations', ids: [3, 4, 9] })).toBe('3 conversations');
  });
  it('write their windows', () => {
    expect(windowsText(reference('a'))).toBe('8\u202f192 × 4');
    expect(windowsText(reference('a', { context: 512, chunks: null }))).toBe('512 × all');
  });
  it('say where a recording is and how long it has left', () => {
    expect(referenceStateText(reference('a'))).toBe('ready');
    expect(referenceStateText(reference('a', { state: 'recording', progress: { fraction: 0.404, eta_s: 185 } }))).toBe('recording 40 %, about 3 min left');
    expect(referenceStateText(reference('a', { state: 'recording', progress: { fraction: 0.9, eta_s: 12 } }))).toBe('recording 90 %, under a minute left');
    expect(referenceStateText(reference('a', { state: 'recording', progress: { fraction: 0, eta_s: null } }))).toBe('recording 0 %');
    expect(referenceStateText(reference('a', { state: 'recording', progress: null }))).toBe('recording');
  });
});

describe('the estimate', () => {
  it('says tokens, size, budget left and free disk', () => {
    expect(estimateText(estimate())).toBe(
      '1\u202f024 tokens scored in 4 windows (of 9\u202f000 in the corpus); 1.0 GiB on disk, of 19.0 GiB left in the 20.0 GiB budget; 400.0 GiB free on the disk.',
    );
    expect(estimateText(estimate({ chunks: 1, free_disk_bytes: null }))).toMatch(/in 1 window \(of .*budget\.$/);
  });
  it('knows when the file would not fit the budget left', () => {
    expect(fitsBudget(estimate())).toBe(true);
    expect(fitsBudget(estimate({ bytes: 19 * 1024 ** 3 + 1 }))).toBe(false);
    expect(budgetLeft(estimate({ used_bytes: 30 * 1024 ** 3 }))).toBe(0);
  });
});

describe('a KLD run among the benchmark runs', () => {
  it('is its own kind: no speed spec, no prompt estimates, its progress and settings in words', async () => {
    const { summary } = await import('../../test/bench');
    const { isKld, progressText, promptsEstimated, runSpecText, speedSpec } = await import('../bench/format');
    const run = summary(4, { kind: 'kld', steps: [], spec: { reference: 'r1a2' }, exact_prompts: false, runs_done: 0, runs_total: 1, kld: null });
    expect(isKld(run)).toBe(true);
    expect(speedSpec(run)).toBeNull();
    expect(promptsEstimated(run)).toBe(false);
    expect(progressText(run)).toBe('llama-perplexity running');
    expect(progressText({ ...run, runs_done: 1 })).toBe('measured');
    expect(runSpecText(run)).toBe("KL divergence against reference r1a2 (llama-perplexity on the profile's placement)");
    expect(isKld(summary(5))).toBe(false);
  });
});
