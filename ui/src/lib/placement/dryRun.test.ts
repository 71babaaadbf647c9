// llama.cpp's dry run beside ours: whole MiB, the difference in %, its colour, the build, and an
// answer with no table (no build for the rig, llama.cpp's own failure).

import { describe, expect, it } from 'vitest';
import type { DryRunResponse, MemoryFigures } from '../api/types';
import { cpuSpec, devicePlan, gpuSpec, options, response } from '../../test/plans';
import { buildLabel, dryRunBodyFor, dryRunRows, dryRunSummary, dryRunView, isNoBuildError, mibText, partDiff, MIB } from './dryRun';
import { DEFAULT_MARGINS } from './editor.svelte';

const figures = (model: number, context: number, compute: number): MemoryFigures => ({
  model_bytes: model * MIB,
  context_bytes: context * MIB,
  compute_bytes: compute * MIB,
});

const NO_BUILD =
  "no llama.cpp build with llama-fit-params is registered for this rig: build the bundled llama.cpp on the Engines page (for the GPUs' backend)";

function answer(over: Partial<DryRunResponse> = {}): DryRunResponse {
  return {
    build: { id: 3, version: 'b6123', backend: 'cuda' },
    dry_run: {
      devices: [
        { device: 'CUDA0', ...figures(20000, 2048, 600) },
        { device: 'Host', ...figures(300, 0, 40) },
      ],
      args: ['-m', '/m/x.gguf', '-ngl', 'all', '-fitp', 'on', '-nr'],
      notes: ['llama-fit-params has no -kvu: it sizes one KV stream per slot (the same total for full attention)'],
    },
    devices: [
      { device: 'GPU 0 · NVIDIA GeForce RTX 3090', llama_device: 'CUDA0', ours: figures(20100, 2048, 640), llama_cpp: figures(20000, 2048, 600) },
      { device: 'CPU RAM · Ryzen 9', llama_device: 'Host', ours: { ...figures(300, 0, 40), model_bytes: 300 * MIB + 1000 }, llama_cpp: figures(300, 0, 40) },
    ],
    error: null,
    ...over,
  };
}

describe('partDiff', () => {
  it('is neutral within 2 %, amber past it', () => {
    expect(partDiff('model', 20100 * MIB, 20000 * MIB)).toMatchObject({ pctText: '+0.5 %', tone: 'same', text: '20100 / 20000' });
    expect(partDiff('model', 19500 * MIB, 20000 * MIB)).toMatchObject({ pctText: '−2.5 %', tone: 'off' });
    expect(partDiff('compute', 640 * MIB, 600 * MIB)).toMatchObject({ pctText: '+6.7 %', tone: 'off' });
    expect(partDiff('compute', 900 * MIB, 600 * MIB).pctText).toBe('+50 %');
  });

  it('counts anything closer than llama.cpp’s rounding (1 MiB) as the same', () => {
    // llama.cpp prints 2 MiB for anything from 2 up to 3 MiB: 2.9 MiB of ours is that figure.
    expect(partDiff('compute', 2.9 * MIB, 2 * MIB)).toMatchObject({ tone: 'same' });
    expect(partDiff('context', 0.5 * MIB, 0)).toMatchObject({ pct: 0, pctText: '0 %', tone: 'same' });
  });

  it('says "new" when llama.cpp has none of what we count', () => {
    expect(partDiff('context', 256 * MIB, 0)).toMatchObject({ pct: null, pctText: 'new', tone: 'off' });
  });

  it('writes whole MiB as llama.cpp does', () => {
    expect(mibText(1536 * MIB)).toBe('1536');
    expect(mibText(1536 * MIB + 0.4 * MIB)).toBe('1536');
    expect(mibText(0)).toBe('0');
  });
});

describe('dryRunView', () => {
  it('gives one row per device, its three parts, the build, notes and flags', () => {
    const v = dryRunView(answer());
    expect(v.kind).toBe('table');
    if (v.kind !== 'table') return;
    expect(v.build).toBe('llama.cpp b6123 cuda');
    expect(v.rows.map((r) => r.llamaDevice)).toEqual(['CUDA0', 'Host']);
    expect(v.rows[0]!.parts.map((p) => [p.part, p.pctText, p.tone])).toEqual([
      ['model', '+0.5 %', 'same'],
      ['context', '0 %', 'same'],
      ['compute', '+6.7 %', 'off'],
    ]);
    expect(v.rows[0]!.off).toBe(true);
    expect(v.rows[1]!.off).toBe(false);
    expect(v.notes).toHaveLength(1);
    expect(v.args).toContain('-fitp');
  });

  it('shows an error as a message, and knows the one the Engines page fixes', () => {
    const v = dryRunView(answer({ build: null, dry_run: null, devices: [], error: NO_BUILD }));
    expect(v).toEqual({ kind: 'error', message: NO_BUILD, noBuild: true, refused: false, build: null });
    const failed = dryRunView(answer({ dry_run: null, devices: [], error: "llama.cpp's dry run failed: failed to load model", refused: true }));
    expect(failed).toMatchObject({ kind: 'error', noBuild: false, refused: true, build: 'llama.cpp b6123 cuda' });
    expect(isNoBuildError(null)).toBe(false);
  });

  it('never crashes on an answer with neither table nor error', () => {
    expect(dryRunView(answer({ dry_run: null }))).toMatchObject({ kind: 'error', noBuild: false });
  });

  it('names the build as llama.cpp <version> <backend>', () => {
    expect(buildLabel({ id: 1, version: '0c1e570', backend: 'cpu' })).toBe('llama.cpp 0c1e570 cpu');
    expect(buildLabel(null)).toBeNull();
  });

  it('rows follow the answer’s devices', () => {
    expect(dryRunRows(answer({ devices: [] }))).toEqual([]);
  });
});

describe('dryRunSummary', () => {
  it('is one line of llama.cpp’s total per device with ours against it', () => {
    const s = dryRunSummary(answer());
    expect(s.ok).toBe(true);
    expect(s.text).toBe('llama.cpp: CUDA0 22.1 GiB (ours +0.6 %) · Host 340.0 MiB (ours 0 %)');
    expect(s.title).toContain('llama.cpp b6123 cuda');
    expect(s.title).toContain('CUDA0 (GPU 0 · NVIDIA GeForce RTX 3090): model 20100 / 20000 MiB +0.5 %');
    expect(s.off).toBe(false);
  });

  it('is the error when there is no table', () => {
    const s = dryRunSummary(answer({ build: null, dry_run: null, devices: [], error: NO_BUILD }));
    expect(s).toMatchObject({ ok: false, text: NO_BUILD, noBuild: true });
    expect(dryRunSummary(answer({ devices: [] })).ok).toBe(false);
  });
});

describe('dryRunBodyFor', () => {
  it('asks about the options the daemon planned, on its rig', () => {
    const planned = options({ tensor_split: [3, 5], context: 8192 });
    const r = response([devicePlan(gpuSpec(0), { layers: [0, 1] }), devicePlan(cpuSpec())], planned, 2);
    r.rig = '4x3090';
    expect(dryRunBodyFor('/m/x.gguf', r, DEFAULT_MARGINS)).toEqual({ model: '/m/x.gguf', rig: '4x3090', options: planned, margins: DEFAULT_MARGINS });
  });
});
