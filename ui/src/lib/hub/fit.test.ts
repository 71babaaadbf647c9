// The fit column of the model page: verdict colours and words, device shares, speed, context.

import { describe, expect, it } from 'vitest';
import type { QuantFit } from '../api/types';
import { contextLabel, deviceShares, fitFor, parseContext, quantDryRunRequest, resolveUrl, shortDeviceName, speedText, verdictLabel, verdictTone } from './fit';

const GIB = 1024 ** 3;

describe('verdicts', () => {
  it('colours each kind', () => {
    expect(verdictTone({ kind: 'on_gpus', gpus: 2 })).toBe('ok');
    expect(verdictTone({ kind: 'experts_in_ram', layers: 30 })).toBe('info');
    expect(verdictTone({ kind: 'layers_in_ram', layers: 3 })).toBe('warn');
    expect(verdictTone({ kind: 'cpu_only' }), 'the CPU is all the rig has: not a warning').toBe('ok');
    expect(verdictTone({ kind: 'does_not_fit', short_bytes: GIB })).toBe('bad');
    expect(verdictTone(null)).toBe('muted');
  });
  it('names each kind in a few words', () => {
    expect(verdictLabel({ kind: 'on_gpus', gpus: 1 })).toBe('on the GPU');
    expect(verdictLabel({ kind: 'on_gpus', gpus: 4 })).toBe('on 4 GPUs');
    expect(verdictLabel({ kind: 'experts_in_ram', layers: 1 })).toBe('experts of 1 layer in RAM');
    expect(verdictLabel({ kind: 'experts_in_ram', layers: 58 })).toBe('experts of 58 layers in RAM');
    expect(verdictLabel({ kind: 'layers_in_ram', layers: 12 })).toBe('12 layers in RAM');
    expect(verdictLabel({ kind: 'cpu_only' })).toBe('on the CPU');
    expect(verdictLabel({ kind: 'does_not_fit', short_bytes: 30.14 * GIB })).toBe('30.1 GiB short');
    expect(verdictLabel(null)).toBe('unknown');
  });
});

describe('device shares', () => {
  it('lists the devices the plan uses, short names, over what they may fill marked', () => {
    const shares = deviceShares([
      { name: 'GPU 0 · NVIDIA GeForce RTX 3090', used_bytes: 12 * GIB, capacity_bytes: 24.5 * GIB, reserve_bytes: 0.5 * GIB },
      { name: 'GPU 1 · NVIDIA GeForce RTX 3090', used_bytes: 0, capacity_bytes: 24 * GIB, reserve_bytes: 0.5 * GIB },
      { name: 'CPU RAM · AMD Ryzen 9', used_bytes: 60 * GIB, capacity_bytes: 64 * GIB, reserve_bytes: 8 * GIB },
    ]);
    expect(shares).toEqual([
      { name: 'GPU 0', title: 'GPU 0 · NVIDIA GeForce RTX 3090: 12.0 of 24.0 GiB (24.5 GiB less 0.5 GiB reserved)', text: '12.0/24.0', pct: 50, over: false },
      { name: 'CPU RAM', title: 'CPU RAM · AMD Ryzen 9: 60.0 of 56.0 GiB (64.0 GiB less 8.0 GiB reserved)', text: '60.0/56.0', pct: 100, over: true },
    ]);
    expect(shortDeviceName('RTX 5090')).toBe('RTX 5090');
  });

  it('counts against capacity less the reserve the planner used, as the placement editor does', () => {
    // 21.9 GiB of RAM available: the planner keeps a quarter (5.5 GiB), not the 8 GiB margin.
    const [ram] = deviceShares([{ name: 'CPU RAM · host', used_bytes: 2 * GIB, capacity_bytes: 21.9 * GIB, reserve_bytes: 21.9 * GIB / 4 }]);
    expect(ram!.text).toBe('2.0/16.4');
    expect(ram!.title).toBe('CPU RAM · host: 2.0 of 16.4 GiB (21.9 GiB less 5.5 GiB reserved)');
  });
});

describe('speed and context', () => {
  it('writes the ceiling', () => {
    expect(speedText(41.26)).toBe('≤ 41.3 tok/s');
    expect(speedText(140.2)).toBe('≤ 140 tok/s');
    expect(speedText(null)).toBe('—');
    expect(speedText(0)).toBe('—');
  });
  it('labels and reads context lengths', () => {
    expect(contextLabel(32768)).toBe('32K');
    expect(contextLabel(131072)).toBe('128K');
    expect(contextLabel(40000)).toBe('40000');
    expect(parseContext('40000')).toBe(40000);
    expect(parseContext('48k')).toBe(49152);
    expect(parseContext(' 1.5 K ')).toBe(1536);
    expect(parseContext('0')).toBeNull();
    expect(parseContext('99999999')).toBeNull();
    expect(parseContext('lots')).toBeNull();
  });
  it('finds a fit by label', () => {
    const fits = [{ label: 'Q4_K_M' }, { label: 'Q8_0' }] as QuantFit[];
    expect(fitFor(fits, 'Q8_0')?.label).toBe('Q8_0');
    expect(fitFor(fits, 'F16')).toBeNull();
    expect(fitFor(null, 'F16')).toBeNull();
  });
});

describe('the dry run of a quantization', () => {
  const commit = '01'.repeat(20);

  it('reads the file at its commit on the hub, each path segment escaped', () => {
    expect(resolveUrl('https://huggingface.co/org/Tiny-GGUF', commit, 'Q4 K/m#1?.gguf')).toBe(
      `https://huggingface.co/org/Tiny-GGUF/resolve/${commit}/Q4%20K/m%231%3F.gguf`,
    );
    expect(resolveUrl('http://127.0.0.1:9000/hf/org/name/', commit, 'x.gguf')).toBe(`http://127.0.0.1:9000/hf/org/name/resolve/${commit}/x.gguf`);
    expect(resolveUrl('javascript:alert(1)', commit, 'x.gguf')).toBeNull();
  });

  it('asks about the first file with the fit’s rig and context and the automatic placement', () => {
    const quant = {
      kind: 'gguf',
      label: 'Q2_K',
      files: [
        { path: 'Q2_K/M-00001-of-00002.gguf', size_bytes: 1, git_oid: 'a', lfs_sha256: null },
        { path: 'Q2_K/M-00002-of-00002.gguf', size_bytes: 1, git_oid: 'b', lfs_sha256: null },
      ],
      total_bytes: 2,
      missing: null,
    };
    expect(quantDryRunRequest('https://hf.co/o/n', commit, quant, 'cpu-minipc', 8192)).toEqual({
      model: `https://hf.co/o/n/resolve/${commit}/Q2_K/M-00001-of-00002.gguf`,
      rig: 'cpu-minipc',
      options: { context: 8192 },
      auto: true,
    });
    expect(quantDryRunRequest('https://hf.co/o/n', commit, { ...quant, files: [] }, 'live', 8192)).toBeNull();
  });
});
