// The models table and evictions as text: state chips with progress, hints, idle timeout,
// concurrency, last use, ordering; the endpoint as this page reaches it.

import { describe, expect, it } from 'vitest';
import { model, T0 } from '../../test/gateway';
import {
  atLimit,
  concurrencyText,
  endpointFor,
  evictionText,
  idleTtlText,
  lastUsedText,
  loadPercent,
  modelStateLabel,
  modelStateTone,
  recentEvictions,
  sortModels,
  stateHint,
} from './models';

describe('model state', () => {
  it('labels each state with the Engines page words, loading with its progress', () => {
    expect(modelStateLabel(model('a'))).toBe('ready');
    expect(modelStateLabel(model('a', { state: 'loading', progress: 0.404 }))).toBe('loading 40%');
    expect(modelStateLabel(model('a', { state: 'loading', progress: null }))).toBe('loading');
    expect(modelStateLabel(model('a', { state: 'crashed' }))).toBe('crashed');
    expect(modelStateLabel(model('a', { state: 'paused' }))).toBe('paused');
    expect(modelStateTone(model('a'))).toBe('ok');
    expect(modelStateTone(model('a', { state: 'starting' }))).toBe('info');
    expect(modelStateTone(model('a', { state: 'stopping' }))).toBe('warn');
    expect(modelStateTone(model('a', { state: 'crashed' }))).toBe('bad');
    expect(modelStateTone(model('a', { state: 'stopped' }))).toBe('muted');
  });

  it('draws the load bar only while loading with a progress, clamped', () => {
    expect(loadPercent(model('a', { state: 'loading', progress: 0.5 }))).toBe(50);
    expect(loadPercent(model('a', { state: 'loading', progress: 1.7 }))).toBe(100);
    expect(loadPercent(model('a', { state: 'loading', progress: null }))).toBeNull();
    expect(loadPercent(model('a', { state: 'ready', progress: 1 }))).toBeNull();
  });

  it('says what a request does now', () => {
    expect(stateHint(model('a', { state: 'stopped', on_demand: true }))).toMatch(/first request starts it/);
    expect(stateHint(model('a', { state: 'stopped' }))).toMatch(/refused/);
    expect(stateHint(model('a', { state: 'loading' }))).toMatch(/wait/);
    expect(stateHint(model('a', { state: 'crashed', on_demand: true }))).toMatch(/Engines page/);
  });
});

describe('model columns', () => {
  it('writes the idle timeout, never when unset', () => {
    expect(idleTtlText(null)).toBe('never');
    expect(idleTtlText(0)).toBe('never');
    expect(idleTtlText(900)).toBe('15 min');
    expect(idleTtlText(7200)).toBe('2 h 0 min');
  });

  it('writes requests in flight against the limit', () => {
    expect(concurrencyText(model('a', { in_flight: 2 }))).toBe('2');
    expect(concurrencyText(model('a', { in_flight: 2, max_concurrent: 4 }))).toBe('2 / 4');
    expect(atLimit(model('a', { in_flight: 4, max_concurrent: 4 }))).toBe(true);
    expect(atLimit(model('a', { in_flight: 3, max_concurrent: 4 }))).toBe(false);
    expect(atLimit(model('a', { in_flight: 99 }))).toBe(false);
  });

  it('writes the last use', () => {
    expect(lastUsedText(null, T0)).toBe('never');
    expect(lastUsedText(T0 - 42_000, T0)).toBe('42 s ago');
  });

  it('puts running models first, then by name', () => {
    const list = [
      model('z-stopped', { state: 'stopped' }),
      model('b-ready'),
      model('crashed', { state: 'crashed' }),
      model('loading', { state: 'loading' }),
      model('a-ready'),
    ];
    expect(sortModels(list).map((m) => m.name)).toEqual(['a-ready', 'b-ready', 'loading', 'crashed', 'z-stopped']);
  });
});

describe('evictions', () => {
  it('say which model went for which, and why', () => {
    expect(evictionText({ at_ms: T0, evicted: 'qwen3-8b', for_model: 'glm-4.5-air', reason: 'not enough GPU memory' })).toBe(
      'evicted qwen3-8b to load glm-4.5-air: not enough GPU memory',
    );
    expect(evictionText({ at_ms: T0, evicted: 'a', for_model: 'b', reason: ' ' })).toBe('evicted a to load b');
    // An idle stop needed no room for another model.
    expect(evictionText({ at_ms: T0, evicted: 'a', for_model: '', reason: 'idle for 15 min' })).toBe('stopped a: idle for 15 min');
  });
  it('list the newest first, at most ten', () => {
    const list = Array.from({ length: 12 }, (_, i) => ({ at_ms: T0 + i, evicted: `m${i}`, for_model: 'x', reason: '' }));
    const shown = recentEvictions(list);
    expect(shown).toHaveLength(10);
    expect(shown[0]!.evicted).toBe('m11');
  });
});

describe('endpointFor', () => {
  it('keeps the address, and says when only the rig reaches it', () => {
    expect(endpointFor('http://127.0.0.1:7878/v1', '127.0.0.1')).toEqual({ url: 'http://127.0.0.1:7878/v1', loopbackOnly: false });
    expect(endpointFor('http://127.0.0.1:7878/v1', 'localhost')).toEqual({ url: 'http://127.0.0.1:7878/v1', loopbackOnly: false });
    expect(endpointFor('http://127.0.0.1:7878/v1', 'gpubox')).toEqual({ url: 'http://127.0.0.1:7878/v1', loopbackOnly: true });
    expect(endpointFor('http://gpubox.lan:7878/v1', 'gpubox.lan').loopbackOnly).toBe(false);
  });
  it("shows the page's host when the daemon listens on every address", () => {
    // The daemon writes 127.0.0.1 for a wildcard bind; its status says 0.0.0.0.
    expect(endpointFor('http://127.0.0.1:7878/v1', 'gpubox', '0.0.0.0:7878')).toEqual({ url: 'http://gpubox:7878/v1', loopbackOnly: false });
    expect(endpointFor('http://127.0.0.1:7878/v1', 'gpubox', '[::]:7878').url).toBe('http://gpubox:7878/v1');
    // Another port, a loopback bind or a page on the rig itself: as given.
    expect(endpointFor('http://127.0.0.1:7878/v1', 'gpubox', '0.0.0.0:9999')).toEqual({ url: 'http://127.0.0.1:7878/v1', loopbackOnly: true });
    expect(endpointFor('http://127.0.0.1:7878/v1', 'gpubox', '127.0.0.1:7878').loopbackOnly).toBe(true);
    expect(endpointFor('http://127.0.0.1:7878/v1', '127.0.0.1', '0.0.0.0:7878')).toEqual({ url: 'http://127.0.0.1:7878/v1', loopbackOnly: false });
  });
  it("shows a wildcard bind at the page's host", () => {
    expect(endpointFor('http://0.0.0.0:7878/v1', 'gpubox')).toEqual({ url: 'http://gpubox:7878/v1', loopbackOnly: false });
    expect(endpointFor('http://0.0.0.0:7878/v1/', 'gpubox').url).toBe('http://gpubox:7878/v1/');
    expect(endpointFor('http://[::]:7878/v1', 'fe80::1').url).toBe('http://[fe80::1]:7878/v1');
  });
  it('passes an address it cannot read through', () => {
    expect(endpointFor('not a url', 'gpubox')).toEqual({ url: 'not a url', loopbackOnly: false });
  });
});
