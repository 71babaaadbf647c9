// Hash routes.

import { describe, expect, it } from 'vitest';
import { benchHash, benchRunId, benchTuneId, benchHalf, BENCH_TABS, tuneHash, chatConversationId, chatHash, GATEWAY_TABS, hashParams, hubModelHash, hubRepo, MODELS_TABS, navRoute, parseHash, planHash, planOpening } from './hash';

describe('parseHash', () => {
  it('maps the routes', () => {
    expect(parseHash('#/')).toBe('dashboard');
    expect(parseHash('')).toBe('dashboard');
    expect(parseHash('#/history')).toBe('history');
    expect(parseHash('#/settings/')).toBe('settings');
    expect(parseHash('#/history?range=1h')).toBe('history');
    expect(parseHash('#/models')).toBe('models');
    expect(parseHash('#/plan?model=%2Fm%2Fx.gguf')).toBe('plan');
    expect(parseHash('#/instances')).toBe('instances');
  });
  it('falls back to the dashboard for anything else', () => {
    expect(parseHash('#/nope')).toBe('dashboard');
  });
  it('shows the editor under Models in the navigation', () => {
    expect(navRoute('plan')).toBe('models');
    expect(navRoute('history')).toBe('history');
  });
});

describe('gateway addresses', () => {
  it('route the endpoint and its usage, both under Gateway', () => {
    expect(parseHash('#/gateway')).toBe('gateway');
    expect(parseHash('#/gateway/')).toBe('gateway');
    expect(parseHash('#/gateway/usage')).toBe('usage');
    expect(parseHash('#/gateway/usage?range=day')).toBe('usage');
    expect(navRoute('gateway')).toBe('gateway');
    expect(navRoute('usage')).toBe('gateway');
  });
});

describe('page tabs', () => {
  it('lead to their own routes, each tab set under one navigation item', () => {
    for (const tabs of [MODELS_TABS, GATEWAY_TABS]) {
      for (const tab of tabs) expect(parseHash(tab.hash)).toBe(tab.route);
      expect(new Set(tabs.map((t) => navRoute(t.route))).size).toBe(1);
    }
  });
});

describe('planHash and hashParams', () => {
  it('round-trip a model path with slashes, spaces and a rig', () => {
    const path = '/home/u/models/GLM 5.2/GLM-5.2-IQ2-00001-of-00006.gguf';
    const h = planHash(path, '4x3090');
    expect(parseHash(h)).toBe('plan');
    expect(hashParams(h).get('model')).toBe(path);
    expect(hashParams(h).get('rig')).toBe('4x3090');
  });
  it('leaves the live rig out of the address', () => {
    expect(hashParams(planHash('/m.gguf', 'live')).get('rig')).toBeNull();
    expect(hashParams('#/models').get('model')).toBeNull();
  });
  it('carries the automatic placement and the context a fit verdict was planned at', () => {
    const h = planHash('/m.gguf', '4x3090', { auto: true, context: 131072 });
    expect(hashParams(h).get('model')).toBe('/m.gguf');
    expect(planOpening(hashParams(h))).toEqual({ auto: true, context: 131072 });
    expect(planOpening(hashParams(planHash('/m.gguf')))).toEqual({ auto: false, context: null });
    // A hand-typed context that is not a whole number of tokens is left out.
    expect(planOpening(hashParams('#/plan?model=x&auto=1&context=lots'))).toEqual({ auto: true, context: null });
  });
});

describe('hub addresses', () => {
  it('route the search and a model page, both under Models', () => {
    expect(parseHash('#/hub')).toBe('hub');
    expect(parseHash('#/hub/')).toBe('hub');
    expect(parseHash('#/hub/unsloth/Qwen3-8B-GGUF')).toBe('hub-model');
    expect(parseHash('#/hub/only-one-part')).toBe('hub');
    expect(navRoute('hub')).toBe('models');
    expect(navRoute('hub-model')).toBe('models');
  });
  it('round-trip a repository id and the suggested quantization', () => {
    const h = hubModelHash('bartowski/Llama-3.2-1B-Instruct-GGUF', 'Q4_K_M');
    expect(h).toBe('#/hub/bartowski/Llama-3.2-1B-Instruct-GGUF?quant=Q4_K_M');
    expect(hubRepo(h)).toBe('bartowski/Llama-3.2-1B-Instruct-GGUF');
    expect(hashParams(h).get('quant')).toBe('Q4_K_M');
    expect(hubRepo(hubModelHash('a b/c?d'))).toBe('a b/c?d');
  });
  it('names no repository for other addresses', () => {
    expect(hubRepo('#/hub')).toBeNull();
    expect(hubRepo('#/hub/a/b/c')).toBeNull();
    expect(hubRepo('#/hub/a%zz/b')).toBeNull();
    expect(hubRepo('#/models')).toBeNull();
  });
});

describe('chat addresses', () => {
  it('route a new chat and a conversation', () => {
    expect(parseHash('#/chat')).toBe('chat');
    expect(parseHash('#/chat/')).toBe('chat');
    expect(parseHash('#/chat/12')).toBe('chat');
    expect(navRoute('chat')).toBe('chat');
  });
  it('round-trip a conversation id', () => {
    expect(chatHash(12)).toBe('#/chat/12');
    expect(chatHash(null)).toBe('#/chat');
    expect(chatConversationId(chatHash(12))).toBe(12);
    expect(chatConversationId('#/chat')).toBeNull();
    expect(chatConversationId('#/chat/abc')).toBeNull();
    expect(chatConversationId('#/chat/1/2')).toBeNull();
  });
});

describe('benchmark addresses', () => {
  it('route the page and a run, both under Benchmarks', () => {
    expect(parseHash('#/bench')).toBe('bench');
    expect(parseHash('#/bench/')).toBe('bench');
    expect(parseHash('#/bench/7')).toBe('bench');
    expect(navRoute('bench')).toBe('bench');
  });
  it('round-trip a run id', () => {
    expect(benchHash(7)).toBe('#/bench/7');
    expect(benchHash(null)).toBe('#/bench');
    expect(benchRunId(benchHash(7))).toBe(7);
    expect(benchRunId('#/bench')).toBeNull();
    expect(benchRunId('#/bench/x')).toBeNull();
    expect(benchRunId('#/chat/7')).toBeNull();
  });
});

describe('tuning addresses', () => {
  it('stay on the Benchmarks page, in its Tuning half', () => {
    expect(parseHash('#/bench/tune')).toBe('bench');
    expect(parseHash('#/bench/tune/3')).toBe('bench');
    expect(benchHalf('#/bench/tune')).toBe('tune');
    expect(benchHalf('#/bench/tune/3/')).toBe('tune');
    expect(benchHalf('#/bench')).toBe('runs');
    expect(benchHalf('#/bench/3')).toBe('runs');
    expect(benchHalf('#/bench/tuner')).toBe('runs');
    expect(benchHalf('#/bench/quality')).toBe('quality');
    expect(benchRunId('#/bench/quality')).toBeNull();
    expect(BENCH_TABS.map((t) => benchHalf(t.hash))).toEqual(['runs', 'tune', 'quality']);
    expect(benchRunId('#/bench/tune/3')).toBeNull();
  });
  it('round-trip a tuning id', () => {
    expect(tuneHash(3)).toBe('#/bench/tune/3');
    expect(tuneHash(null)).toBe('#/bench/tune');
    expect(benchTuneId(tuneHash(3))).toBe(3);
    expect(benchTuneId('#/bench/tune')).toBeNull();
    expect(benchTuneId('#/bench/3')).toBeNull();
    expect(benchTuneId('#/bench/tune/x')).toBeNull();
  });
});
