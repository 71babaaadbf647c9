// The quality probe's shaping: categories in the probe's order, notes beside answers, picked
// probes side by side, and each target's latest speed beside its latest pass rate.

import { describe, expect, it } from 'vitest';
import { answer, digest, point, probeAnswers, probeSummary, qualityOf, summary } from '../../test/bench';
import { answerNotes, answerTrouble, byTarget, categoryRows, compareProbes, formatPoints, shortAnswer } from './quality';

describe('categoryRows', () => {
  it('lists the categories in the probe’s order, unknown ones after, with their rates', () => {
    const rows = categoryRows({
      total: 30,
      answered: 12,
      passed: 5,
      pass_rate: 5 / 12,
      errors: 0,
      by_category: { facts: [2, 2], zeta: [0, 1], code: [0, 3], arithmetic: [3, 6], alpha: [0, 0] },
    });
    expect(rows.map((r) => r.category)).toEqual(['arithmetic', 'code', 'facts', 'alpha', 'zeta']);
    expect(rows[0]).toEqual({ category: 'arithmetic', passed: 3, total: 6, rate: 0.5 });
    expect(rows.find((r) => r.category === 'alpha')?.rate).toBeNull();
  });
  it('is empty without a summary (a speed benchmark)', () => {
    expect(categoryRows(null)).toEqual([]);
    expect(categoryRows(undefined)).toEqual([]);
  });
});

describe('answers', () => {
  it('say why there is no answer', () => {
    expect(answerNotes(answer('a', 'code'))).toEqual([]);
    expect(answerNotes(answer('a', 'code', { got: null, pass: false, truncated: true }))).toEqual(['cut at max tokens before answering']);
    expect(answerNotes(answer('a', 'code', { got: null, pass: false }))).toEqual(['no answer line']);
    expect(answerNotes(answer('a', 'code', { got: null, pass: false, error: 'timed out after 600 s' }))).toEqual(['failed: timed out after 600 s']);
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
    const f16 = probeSummary(1, probeAnswers({ arithmetic: 6, reasoning: 6, text: 4, code: 4, facts: 6 }));
    const q8kv = probeSummary(2, probeAnswers({ arithmetic: 3, reasoning: 2, text: 4, code: 1, facts: 6 }));
    const rows = compareProbes([f16, summary(3), q8kv]);
    expect(rows.map((r) => r.key)).toEqual(['overall', 'arithmetic', 'reasoning', 'text', 'code', 'facts']);
    const overall = rows[0]!;
    expect(overall.cells).toHaveLength(2);
    expect(overall.cells[0]).toEqual({ passed: 26, total: 30, rate: 26 / 30, diff: null });
    expect(overall.cells[1]?.passed).toBe(16);
    expect(overall.cells[1]?.diff).toBeCloseTo(16 / 30 - 26 / 30);
    const arithmetic = rows[1]!;
    expect(arithmetic.cells.map((c) => c?.diff)).toEqual([null, -0.5]);
  });
  it('leaves a cell empty where a probe has no answer of the category', () => {
    const whole = probeSummary(1);
    const partial = probeSummary(2, probeAnswers({ arithmetic: 6 }, 6), { status: 'cancelled' });
    const rows = compareProbes([whole, partial]);
    expect(rows.find((r) => r.key === 'facts')?.cells[1]).toBeNull();
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
      probe(6, 'qwen-q8kv', { arithmetic: 2, facts: 5 }),
      speed(5, 'qwen-q8kv', 61),
      probe(4, 'qwen-f16', { arithmetic: 6, reasoning: 8, text: 5, code: 5, facts: 6 }),
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
      probe(5, 'a', { facts: 6 }, { status: 'running', finished_at_ms: null }),
      speed(4, 'a', 99, { status: 'cancelled' }),
      probe(3, 'a', { facts: 3 }),
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
      probeSummary(1, probeAnswers({ facts: 1 }), { target: { kind: 'profile', name: 'qwen' } }),
      speed(2, 'qwen', 40),
      summary(3, { target: { kind: 'gateway', model: 'fast' } }),
    ]);
    expect(rows.map((r) => r.label)).toEqual(['gateway/fast', 'profile qwen', 'qwen']);
    expect(qualityOf(probeAnswers({ facts: 1 })).passed).toBe(1);
  });
});
