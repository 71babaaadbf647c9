// The download panel's list: events, fetched lists and answers, in the orders they really arrive.

import { describe, expect, it } from 'vitest';
import { view } from '../../test/downloads';
import {
  applyDownload,
  bytesText,
  downloadButtons,
  downloadOf,
  etaText,
  mergeFetched,
  progressPct,
  queueSummary,
  rateText,
  removeDownload,
  stateLabel,
  stateTone,
} from './queue';

const GIB = 1024 ** 3;

describe('applyDownload', () => {
  it('adds a new download on top and replaces a known one', () => {
    let list = applyDownload([], view(1, 'done'), 'state');
    list = applyDownload(list, view(2, 'queued'), 'state');
    expect(list.map((d) => d.id)).toEqual([2, 1]);
    list = applyDownload(list, view(2, 'running'), 'state');
    list = applyDownload(list, view(2, 'running', GIB), 'progress');
    expect(list[0]!.progress.done_bytes).toBe(GIB);
    expect(list.map((d) => d.state)).toEqual(['running', 'done']);
  });

  it('lets a late progress report move nothing out of paused, done or cancelled', () => {
    for (const state of ['paused', 'done', 'cancelled', 'failed']) {
      const list = [view(3, state, 2 * GIB)];
      expect(applyDownload(list, view(3, 'running', GIB), 'progress')).toBe(list);
    }
  });

  it('takes a progress report that comes before the running state', () => {
    const list = applyDownload([view(4, 'queued')], view(4, 'running', GIB), 'progress');
    expect(list[0]!.state).toBe('running');
  });
});

describe('mergeFetched', () => {
  it('takes the fetched list but keeps what events changed meanwhile, and drops what is gone', () => {
    const current = [view(5, 'done'), view(4, 'running', GIB), view(3, 'failed')];
    const fetched = [view(4, 'running', 0), view(3, 'queued'), view(2, 'done')];
    const merged = mergeFetched(current, fetched, new Set([5, 4]));
    expect(merged.map((d) => [d.id, d.state, d.progress.done_bytes])).toEqual([
      [5, 'done', 0],
      [4, 'running', GIB],
      [3, 'queued', 0],
      [2, 'done', 0],
    ]);
  });
  it('removes a forgotten download', () => {
    expect(removeDownload([view(1, 'done'), view(2, 'failed')], 1).map((d) => d.id)).toEqual([2]);
  });
});

describe('buttons and labels', () => {
  it('offers what each state allows', () => {
    expect(downloadButtons('queued')).toEqual(['pause', 'cancel']);
    expect(downloadButtons('running')).toEqual(['pause', 'cancel']);
    expect(downloadButtons('paused')).toEqual(['resume', 'cancel']);
    expect(downloadButtons('failed')).toEqual(['retry', 'remove']);
    expect(downloadButtons('cancelled')).toEqual(['retry', 'remove']);
    expect(downloadButtons('done')).toEqual(['remove']);
    expect(downloadButtons('brand_new')).toEqual([]);
  });

  it('shows progress, rate and time left while running', () => {
    const v = view(1, 'running', GIB, {});
    v.progress.rate_bps = 48_200_000;
    v.progress.eta_s = 185;
    expect(stateLabel(v)).toBe('downloading 25 %');
    expect(progressPct(v.progress)).toBe(25);
    expect(bytesText(v.progress)).toBe('1.0 / 4.0 GiB');
    expect(rateText(v)).toBe('48.2 MB/s');
    expect(etaText(v)).toBe('3 min left');
    expect(stateTone('running')).toBe('info');
  });

  it('shows a dash for rate and time when not running, and no percentage before the size is known', () => {
    const v = view(1, 'paused', GIB);
    v.progress.rate_bps = 1000;
    v.progress.eta_s = 10;
    expect(rateText(v)).toBe('—');
    expect(etaText(v)).toBe('—');
    expect(stateLabel(v)).toBe('paused');
    expect(progressPct({ ...v.progress, total_bytes: 0 })).toBeNull();
    expect(stateTone('failed')).toBe('bad');
    expect(stateTone('done')).toBe('ok');
  });
});

describe('downloadOf', () => {
  it('finds the newest download of a quantization that was not cancelled', () => {
    const list = [view(1, 'done'), view(2, 'cancelled'), view(3, 'failed', 0, { label: 'Q8_0' })];
    expect(downloadOf(list, 'unsloth/Qwen3-8B-GGUF', 'Q4_K_M')?.id).toBe(1);
    expect(downloadOf(list, 'unsloth/Qwen3-8B-GGUF', 'Q8_0')?.id).toBe(3);
    expect(downloadOf(list, 'other/repo', 'Q4_K_M')).toBeNull();
    expect(downloadOf(null, 'x/y', 'Q4_K_M')).toBeNull();
  });
});

describe('queueSummary', () => {
  it('names the running download as downloading, not as queued', () => {
    expect(queueSummary([view(1, 'running'), view(2, 'done')])).toBe('1 downloading');
  });

  it('counts what runs, waits and is paused apart', () => {
    const list = [view(1, 'running'), view(2, 'queued'), view(3, 'queued'), view(4, 'paused'), view(5, 'failed')];
    expect(queueSummary(list)).toBe('1 downloading, 2 queued, 1 paused');
    expect(queueSummary([view(1, 'queued')])).toBe('1 queued');
  });

  it('says nothing when nothing is under way', () => {
    expect(queueSummary([view(1, 'done'), view(2, 'cancelled')])).toBeNull();
  });
});
