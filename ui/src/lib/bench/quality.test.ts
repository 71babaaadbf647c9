// The quality probe's shaping: categories in the probe's order with their intervals and failed
// requests, notes beside answers, picked probes side by side with the paired test in words, and
// each target's latest speed beside its latest pass rate.

import { describe, expect, it } from 'vitest';
import { answer, digest, point, probeAnswers, probeSummary, qualityOf, summary, wilsonOf } from '../../test/bench';
import {
  answerNotes,
  answerTrouble,
  byTarget,
  categoryRows,
  compareProbes,
  discordantText,
  formatInterval,
  formatP,
  formatPoints,
  rateWithInterval,
  shortAnswer,
  verdictText,
} from './quality';
import type { ProbeComparison } from './types';

describe('categoryRows', () => {
  it('lists the categories in the probe’s order, unknown ones after, with their rates, intervals and failed requests', () => {
    const rows = categoryRows({
      total: 30,
      answered: 14,
      graded: 12,
      passed: 5,
      pass_rate: 5 / 12,
      interval: { low: 0.19, high: 0.68 },
      errors: 2,
      by_category: { dates: [2, 2], zeta: [0, 1], code: [0, 3], arithmetic: [3, 6], alpha: [0, 0] },
      category_intervals: { arithmetic: { low: 0.188, high: 0.812 } },
      category_errors: { alpha: 2 },
    });
    expect(rows.map((r) => r.category)).toEqual(['arithmetic', 'dates', 'code', 'alpha', 'zeta']);
    expect(rows[0]).toEqual({ category: 'arithmetic', passed: 3, total: 6, rate: 0.5, interval: { low: 0.188, high: 0.812 }, errors: 0 });
    const alpha = rows.find((r) => r.category === 'alpha');
    expect(alpha?.rate).toBeNull();
    expect(alpha?.interval).toBeNull();
    expect(alpha?.errors).toBe(2);
  });
  it('is empty without a summary (a speed benchmark)', () => {
    expect(categoryRows(null)).toEqual([]);
    expect(categoryRows(undefined)).toEqual([]);
  });
});

describe('intervals', () => {
  it('are written as whole percentages, with the rate when there is one', () => {
    expect(formatInterval({ low: 0.3087, high: 0.8632 })).toBe('31–86 %');
    expect(formatInterval(null)).toBe('—');
    expect(rateWithInterval(5 / 8, { low: 0.3087, high: 0.8632 })).toBe('63 % (95 % interval 31–86 %)');
    expect(rateWithInterval(0.5, null)).toBe('50 %');
    expect(rateWithInterval(null, null)).toBe('—');
  });
  it('come with every summary the fixtures make, as the daemon sends them', () => {
    // The daemon's Wilson interval for 0 of 10 (crates/bench significance.rs tests it too).
    expect(wilsonOf(0, 10)?.high).toBeCloseTo(0.2775, 4);
    const q = qualityOf(probeAnswers({ arithmetic: 3 }, 10));
    expect(q.interval).toEqual(wilsonOf(3, 10));
  });
});

describe('the paired test', () => {
  const comparison = (extra: Partial<ProbeComparison>): ProbeComparison => ({
    shared: 35,
    base: { passed: 29, pass_rate: 29 / 35, interval: null },
    other: { passed: 21, pass_rate: 21 / 35, interval: null },
    both_passed: 20,
    base_only: 9,
    other_only: 1,
    neither: 5,
    p_value: 22 / 1024,
    verdict: 'base_better',
    left_out: 0,
    ...extra,
  });
  it('names the better probe only when the test tells them apart', () => {
    expect(verdictText(comparison({}), '#1', '#4')).toBe('#1 better (p = 0.021)');
    expect(verdictText(comparison({ verdict: 'other_better', p_value: 0.0004 }), '#1', '#4')).toBe('#4 better (p < 0.001)');
    expect(verdictText(comparison({ verdict: 'not_distinguishable', p_value: 0.375 }), '#1', '#4')).toBe('not distinguishable (p = 0.375)');
    expect(verdictText(comparison({ verdict: 'not_distinguishable', p_value: 1 }), '#1', '#4')).toBe('not distinguishable (p = 1)');
  });
  it('says which questions only one of them passed', () => {
    expect(discordantText(comparison({}), '#1', '#4')).toBe('only #1 passed 9, only #4 passed 1, of 35 shared');
  });
  it('writes p-values as the CLI does', () => {
    expect(formatP(0.5)).toBe('p = 0.5');
    expect(formatP(0.0213)).toBe('p = 0.021');
    expect(formatP(0.00099)).toBe('p < 0.001');
  });
});

describe('answers', () => {
  it('say why there is no answer', () => {
    expect(answerNotes(answer('a', 'code'))).toEqual([]);
    expect(answerNotes(answer('a', 'code', { got: null, pass: false, truncated: true }))).toEqual(['cut at max tokens before answering']);
    expect(answerNotes(answer('a', 'code', { got: null, pass: false }))).toEqual(['no answer line']);
    expect(answerNotes(answer('a', 'code', { got: null, pass: false, error: 'timed out after 600 s' }))).toEqual(['request failed, not graded: timed out after 600 s']);
    // A wrong answer is just wrong: nothing to add.
    expect(answerNotes(answer('a', 'code', { got: '7', pass: false }))).toEqual([]);
  });
  it('are cut short for a table cell, on one line', () => {
    expect(shortAnswer('10063')).toBe('10063');
    expect(shortAnswer('  the\n answer  is\t7 ')).toBe('the answer is 7');
    const long = 'word '.repeat(40);
    expect(shortAnswer(long)).toBe(`${'word '.repeat(11)}word…`);
    expect(shortAnswer(long)).toHaveLength(60);
    expect(shortAnswer('abcdefghij', 5)).toBe('abcd…');
  });
  it('count the replies cut short and the failed requests', () => {
    const answers = [answer('a', 'text', { truncated: true, got: null, pass: false }), answer('b', 'text', { error: 'HTTP 500', got: null, pass: false }), answer('c', 'text')];
    expect(answerTrouble(answers)).toEqual({ truncated: 1, errors: 1 });
  });
  it('write differences of pass rates in percentage points', () => {
    expect(formatPoints(0.24 - 0.52)).toBe('−28 pts');
    expect(formatPoints(0.1)).toBe('+10 pts');
    expect(formatPoints(0.001)).toBe('±0 pts');
    expect(formatPoints(null)).toBe('—');
  });
});

describe('compareProbes', () => {
  it('sets the probes side by side, overall and per category, against the first picked', () => {
    const f16 = probeSummary(1, probeAnswers({ arithmetic: 6, units: 6, dates: 4, strings: 4, code: 6 }));
    const q8kv = probeSummary(2, probeAnswers({ arithmetic: 3, units: 2, dates: 4, strings: 1, code: 6 }));
    const rows = compareProbes([f16, summary(3), q8kv]);
    expect(rows.map((r) => r.key)).toEqual(['overall', 'arithmetic', 'units', 'dates', 'strings', 'code']);
    const overall = rows[0]!;
    expect(overall.cells).toHaveLength(2);
    expect(overall.cells[0]).toEqual({ passed: 26, total: 30, rate: 26 / 30, interval: wilsonOf(26, 30), diff: null });
    expect(overall.cells[1]?.passed).toBe(16);
    expect(overall.cells[1]?.diff).toBeCloseTo(16 / 30 - 26 / 30);
    const arithmetic = rows[1]!;
    expect(arithmetic.cells.map((c) => c?.diff)).toEqual([null, -0.5]);
    expect(arithmetic.cells[1]?.interval).toEqual(wilsonOf(3, 6));
  });
  it('counts only graded answers: a failed request is neither passed nor wrong', () => {
    const answers = probeAnswers({ arithmetic: 6 });
    answers[0] = { ...answers[0]!, error: 'timed out after 600 s', pass: false, got: null };
    const rows = compareProbes([probeSummary(1), probeSummary(2, answers)]);
    expect(rows[0]?.cells[1]).toMatchObject({ passed: 5, total: 29 });
    expect(rows.find((r) => r.key === 'arithmetic')?.cells[1]).toMatchObject({ passed: 5, total: 5, rate: 1 });
  });
  it('leaves a cell empty where a probe has no answer of the category', () => {
    const whole = probeSummary(1);
    const partial = probeSummary(2, probeAnswers({ arithmetic: 6 }, 6), { status: 'cancelled' });
    const rows = compareProbes([whole, partial]);
    expect(rows.find((r) => r.key === 'code')?.cells[1]).toBeNull();
    expect(rows.find((r) => r.key === 'arithmetic')?.cells[1]).toMatchObject({ passed: 6, total: 6, rate: 1, diff: 0 });
    expect(compareProbes([summary(1), summary(2)])).toEqual([]);
  });
});

describe('byTarget', () => {
  const speed = (id: number, name: string, aggregate: number, extra = {}) =>
    summary(id, { target: { kind: 'instance', name }, steps: [digest(point(256, 512), { aggregate_tps: aggregate, stream_tps: aggregate })], ...extra });
  const probe = (id: number, name: string, passed: Record<string, number>, extra = {}) =>
    probeSummary(id, probeAnswers(passed), { target: { kind: 'instance', name }, ...extra });

  it('puts each target’s latest finished speed beside its latest finished pass rate', () => {
    const rows = byTarget([
      probe(6, 'qwen-q8kv', { arithmetic: 2, code: 5 }),
      speed(5, 'qwen-q8kv', 61),
      probe(4, 'qwen-f16', { arithmetic: 6, units: 6, dates: 6, strings: 6, code: 6 }),
      speed(3, 'qwen-f16', 52),
      speed(2, 'qwen-f16', 50),
      probe(1, 'qwen-f16', { arithmetic: 1 }),
    ]);
    expect(rows.map((r) => r.label)).toEqual(['qwen-f16', 'qwen-q8kv']);
    const [f16, q8] = rows;
    expect(f16?.speed).toMatchObject({ id: 3, aggregate: 52, stream: 52, point: point(256, 512) });
    expect(f16?.quality).toMatchObject({ id: 4, passed: 30, answered: 30, rate: 1 });
    expect(q8?.speed?.aggregate).toBe(61);
    expect(q8?.quality).toMatchObject({ id: 6, passed: 7, answered: 30 });
  });
  it('leaves out runs that did not finish, and targets with nothing finished', () => {
    const rows = byTarget([
      probe(5, 'a', { code: 6 }, { status: 'running', finished_at_ms: null }),
      speed(4, 'a', 99, { status: 'cancelled' }),
      probe(3, 'a', { code: 3 }),
      speed(2, 'b', 10, { status: 'failed' }),
      probeSummary(1, [], { target: { kind: 'instance', name: 'c' } }),
    ]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ label: 'a', speed: null, quality: { id: 3, passed: 3 } });
  });
  it('takes the latest by when it finished, whatever the list order', () => {
    const rows = byTarget([speed(1, 'a', 10, { finished_at_ms: 5_000 }), speed(2, 'a', 20, { finished_at_ms: 4_000 })]);
    expect(rows[0]?.speed?.id).toBe(1);
  });
  it('names targets as the runs list does', () => {
    const rows = byTarget([
      probeSummary(1, probeAnswers({ code: 1 }), { target: { kind: 'profile', name: 'qwen' } }),
      speed(2, 'qwen', 40),
      summary(3, { target: { kind: 'gateway', model: 'fast' } }),
    ]);
    expect(rows.map((r) => r.label)).toEqual(['gateway/fast', 'profile qwen', 'qwen']);
    expect(qualityOf(probeAnswers({ code: 1 })).passed).toBe(1);
  });
});
