// The live rate, context use, reasoning time and the short forms of the numbers.

import { describe, expect, it } from 'vitest';
import { msg } from '../../test/chat';
import { contextUse, formatMs, formatTokens, formatTps, liveTokensPerSecond, pushSample, reasoningSeconds, replyEnding, thoughtLabel } from './stats';

const stats = (s: Partial<ReturnType<typeof msg>['stats']>) => ({ ttft_ms: null, prompt_tps: null, decode_tps: null, prompt_tokens: null, completion_tokens: null, duration_ms: null, ...s });

describe('live tokens per second', () => {
  it('needs a quarter second of samples', () => {
    expect(liveTokensPerSecond([])).toBeNull();
    expect(liveTokensPerSecond([{ elapsedMs: 100, tokens: 1 }, { elapsedMs: 200, tokens: 5 }])).toBeNull();
  });
  it('is the token rate across the samples', () => {
    let s = pushSample([], { elapsedMs: 1000, tokens: 10 });
    s = pushSample(s, { elapsedMs: 1500, tokens: 30 });
    s = pushSample(s, { elapsedMs: 2000, tokens: 50 });
    expect(liveTokensPerSecond(s)).toBeCloseTo(40);
  });
  it('follows the last seconds only', () => {
    let s = pushSample([], { elapsedMs: 0, tokens: 0 });
    for (let t = 500; t <= 10_000; t += 500) s = pushSample(s, { elapsedMs: t, tokens: t < 5000 ? t / 50 : 100 + (t - 5000) / 10 });
    // 100 tok/s over the last three seconds (the first half went at 20).
    expect(liveTokensPerSecond(s)).toBeCloseTo(100);
    expect(s[0]!.elapsedMs).toBeGreaterThanOrEqual(6500);
  });
  it('drops samples from the future (a refetch mid-stream)', () => {
    const s = pushSample([{ elapsedMs: 3000, tokens: 9 }], { elapsedMs: 1000, tokens: 3 });
    expect(s).toEqual([{ elapsedMs: 1000, tokens: 3 }]);
  });
});

describe('context use', () => {
  const path = [
    msg(1, null),
    msg(2, 1, 'assistant', { stats: stats({ prompt_tokens: 100, completion_tokens: 50 }) }),
    msg(3, 2),
    msg(4, 3, 'assistant', { stats: stats({ prompt_tokens: 300, completion_tokens: 200 }) }),
  ];
  it('is the last reply’s prompt and reply tokens against the context', () => {
    expect(contextUse(path, 1000)).toEqual({ used: 500, total: 1000, fraction: 0.5 });
  });
  it('looks past replies without counts (a failed one)', () => {
    expect(contextUse([...path, msg(5, 4), msg(6, 5, 'assistant', { status: 'error' })], 1000)?.used).toBe(500);
  });
  it('adds a streaming reply’s tokens so far to the conversation before it', () => {
    const live = [...path, msg(5, 4), msg(6, 5, 'assistant', { status: 'streaming' })];
    expect(contextUse(live, 1000, 40)?.used).toBe(540);
  });
  it('caps the fraction and knows nothing without a context size or counts', () => {
    expect(contextUse(path, 400)?.fraction).toBe(1);
    expect(contextUse(path, null)).toBeNull();
    expect(contextUse([msg(1, null)], 1000)).toBeNull();
  });
});

describe('reasoning time', () => {
  const m = { reasoning: 'aaaa', content: 'bbbb', stats: stats({ ttft_ms: 1000, duration_ms: 5000 }) };
  it('prefers the daemon’s figure, then what was seen live', () => {
    expect(reasoningSeconds({ ...m, stats: { ...m.stats, reasoning_ms: 1234 } })).toEqual({ seconds: 1.234, estimated: false });
    expect(reasoningSeconds(m, 2500)).toEqual({ seconds: 2.5, estimated: false });
  });
  it('estimates from the duration shared by characters', () => {
    expect(reasoningSeconds(m)).toEqual({ seconds: 3, estimated: true });
  });
  it('is nothing without reasoning or numbers', () => {
    expect(reasoningSeconds({ ...m, reasoning: '' })).toBeNull();
    expect(reasoningSeconds({ ...m, stats: stats({}) })).toBeNull();
  });
  it('reads as the page shows it', () => {
    expect(thoughtLabel({ seconds: 12.34, estimated: false }, false)).toBe('Thought for 12.3 s');
    expect(thoughtLabel({ seconds: 3, estimated: true }, false)).toBe('Thought for about 3.0 s');
    expect(thoughtLabel(null, true)).toBe('Thinking…');
    expect(thoughtLabel(null, false)).toBe('Thoughts');
  });
});

describe('formats', () => {
  it('durations, rates and token counts', () => {
    expect(formatMs(340.4)).toBe('340 ms');
    expect(formatMs(2400)).toBe('2.4 s');
    expect(formatMs(72_000)).toBe('1 min 12 s');
    expect(formatMs(null)).toBe('—');
    expect(formatTps(42.06)).toBe('42.1 tok/s');
    expect(formatTps(812.4)).toBe('812 tok/s');
    expect(formatTokens(812)).toBe('812');
    expect(formatTokens(12_300)).toBe('12.3k');
    expect(formatTokens(8192)).toBe('8.2k');
    expect(formatTokens(131_072)).toBe('131k');
    expect(formatTokens(2000)).toBe('2k');
  });
});

describe('reply ending', () => {
  const figures = stats({ prompt_tokens: 5, completion_tokens: 2048 });
  it('tells a stop by the user from the length limit', () => {
    expect(replyEnding({ status: 'stopped', content: 'Once', stats: { ...figures, completion_tokens: 12 } })).toEqual({
      label: 'stopped by you',
      note: 'Stopped by you; the text so far is kept.',
    });
    const cut = replyEnding({ status: 'complete', content: 'x', stats: { ...figures, finish_reason: 'length', max_tokens: 2048 } });
    expect(cut?.label).toBe('stopped: length limit (2048 tokens)');
    expect(cut?.note).toContain('raise Max tokens');
  });
  it('is nothing for a reply that ended by itself, or is still being written', () => {
    expect(replyEnding({ status: 'complete', content: 'x', stats: { ...figures, finish_reason: 'stop' } })).toBeNull();
    expect(replyEnding({ status: 'streaming', content: 'x', stats: figures })).toBeNull();
  });
  it('says a stop came before any text', () => {
    expect(replyEnding({ status: 'stopped', content: '', stats: figures })?.note).toBe('Stopped by you before any text.');
  });
});
