// This rig's records in words: the signed "off by", the source, the correction the plan uses, the
// uncorrected figures beside the corrected ones, and the library's badge by architecture.

import { describe, expect, it } from 'vitest';
import type { Calibration, DeviceCalibration } from '../api/types';
import { cpuSpec, devicePlan, gpuSpec, GIB, MIB } from '../../test/plans';
import {
  calibrationFor,
  calibrationNote,
  correctionParts,
  modelCalibration,
  offText,
  partFigure,
  sourceWords,
  uncorrectedComputeNote,
} from './calibration';

const NOW = 1_764_000_000_000;
const HOUR = 3_600_000;

function record(over: Partial<Calibration> = {}, last: Partial<Calibration['last']> = {}): Calibration {
  return {
    architecture: 'llama',
    backend: 'cuda',
    device_model: 'NVIDIA GeForce RTX 3090',
    last: {
      source: 'dry_run',
      at_ms: NOW - 2 * HOUR,
      model: '/models/llama-8b-q4.gguf',
      estimated_bytes: 1123 * MIB,
      observed_bytes: 1000 * MIB,
      off_by_percent: 12.3,
      ...last,
    },
    correction: { compute_factor: 0.73, overhead_bytes: 300 * MIB },
    dry_runs: 2,
    measured: 1,
    ...over,
  };
}

const onGpu = (index: number, over: Partial<Calibration> = {}): DeviceCalibration => ({ device: { kind: 'gpu', index }, ...record(over) });
const onCpu = (over: Partial<Calibration> = {}): DeviceCalibration => ({ device: { kind: 'cpu' }, ...record({ backend: 'cpu', device_model: 'CPU', ...over }) });

describe('offText', () => {
  it('signs the difference as the dry-run table does: + = the estimate was too high', () => {
    expect(offText(record({}, { off_by_percent: 2.54 }))).toBe('+2.5 %');
    expect(offText(record({}, { off_by_percent: -4.04 }))).toBe('−4 %');
    expect(offText(record({}, { off_by_percent: 12.3 }))).toBe('+12 %');
    expect(offText(record({}, { off_by_percent: 0.01 }))).toBe('0 %');
  });

  it('has nothing to say when nothing was observed', () => {
    expect(offText(record({}, { off_by_percent: null }))).toBeNull();
  });
});

describe('sources and devices', () => {
  it('names the source in words, and keeps one it does not know', () => {
    expect(sourceWords('dry_run')).toBe('llama.cpp dry run');
    expect(sourceWords('measured')).toBe('measured engine');
    expect(sourceWords('benchmark')).toBe('benchmark');
  });

  it('finds each device’s calibration by its id', () => {
    const list = [onGpu(1), onCpu()];
    expect(calibrationFor(list, { kind: 'gpu', index: 1 })).toBe(list[0]);
    expect(calibrationFor(list, { kind: 'cpu' })).toBe(list[1]);
    expect(calibrationFor(list, { kind: 'gpu', index: 0 })).toBeNull();
    expect(calibrationFor(undefined, { kind: 'cpu' })).toBeNull();
  });
});

describe('correctionParts', () => {
  it('says what the plan changes, and nothing for a factor of 1 without a measured overhead', () => {
    expect(correctionParts({ compute_factor: 0.73, overhead_bytes: 300 * MIB })).toEqual(['compute × 0.73', 'overhead 300 MiB measured']);
    expect(correctionParts({ compute_factor: 1.001, overhead_bytes: null })).toEqual([]);
    // A broken factor changes nothing in the plan either (correction.rs).
    expect(correctionParts({ compute_factor: Number.NaN, overhead_bytes: null })).toEqual([]);
    expect(correctionParts({ compute_factor: 0, overhead_bytes: null })).toEqual([]);
  });
});

describe('calibrationNote', () => {
  it('gives the line’s pieces: off by, source, when, and the correction', () => {
    const v = calibrationNote(onGpu(0), NOW);
    expect(v).toMatchObject({ off: '+12 %', tone: 'off', source: 'llama.cpp dry run', ago: '2 h 0 min ago', correction: 'compute × 0.73 · overhead 300 MiB measured' });
    expect(v.title).toMatch(/llama-8b-q4\.gguf/);
    expect(v.title).toMatch(/estimated 1\.1 GiB, observed 1000\.0 MiB/);
    expect(v.title).toMatch(/llama on NVIDIA GeForce RTX 3090 \(cuda\): 2 dry runs, 1 measured engine\./);
    expect(v.title).toMatch(/figures shown are corrected: compute × 0\.73/);
  });

  it('is neutral within 2 % and says when no correction is needed', () => {
    const v = calibrationNote(onCpu({ correction: { compute_factor: 1, overhead_bytes: null }, last: { ...record().last, source: 'measured', off_by_percent: -1.2, at_ms: NOW - 5 * 60_000 } }), NOW);
    expect(v).toMatchObject({ off: '−1.2 %', tone: 'same', source: 'measured engine', ago: '5 min ago', correction: null });
    expect(v.title).toMatch(/no correction/);
  });
});

describe('partFigure', () => {
  it('keeps the estimate before the correction beside the corrected compute figure', () => {
    const d = devicePlan(gpuSpec(0), { compute_bytes: 0.73 * GIB, compute_estimate_bytes: 1 * GIB });
    const f = partFigure('compute', 'Compute', d.usage.compute_bytes, d);
    expect(f.before).toBe('1.0');
    expect(f.title).toBe('Compute: 0.73 GiB, corrected by this rig’s dry runs (the estimate before: 1.00 GiB, 1024 MiB)');
  });

  it('tells of the difference in the tooltip only when both read the same in the column', () => {
    const d = devicePlan(cpuSpec(), { compute_bytes: 30 * MIB, compute_estimate_bytes: 40 * MIB });
    const f = partFigure('compute', 'Compute', d.usage.compute_bytes, d);
    expect(f.before).toBeNull();
    expect(f.title).toMatch(/the estimate before: 0\.04 GiB, 40 MiB/);
  });

  it('leaves an uncorrected figure alone, and a plan from before the records', () => {
    const same = devicePlan(gpuSpec(0), { compute_bytes: GIB, compute_estimate_bytes: GIB });
    expect(partFigure('compute', 'Compute', GIB, same)).toEqual({ title: 'Compute: 1.00 GiB', before: null });
    const old = devicePlan(gpuSpec(0), { compute_bytes: GIB });
    expect(partFigure('compute', 'Compute', GIB, old).before).toBeNull();
    const zero = devicePlan(gpuSpec(0), { compute_bytes: GIB, compute_estimate_bytes: 0 });
    expect(partFigure('compute', 'Compute', GIB, zero).before).toBeNull();
    expect(partFigure('weights', 'Weights', 3 * GIB, same)).toEqual({ title: 'Weights: 3.00 GiB', before: null });
  });

  it('shows a GPU’s measured overhead against the margin it replaced', () => {
    const spec = gpuSpec(0, { overhead_bytes: 1 * GIB, correction: { compute_factor: 1, overhead_bytes: 300 * MIB } });
    const d = devicePlan(spec, { overhead_bytes: 300 * MIB });
    const f = partFigure('overhead', 'Overhead', 300 * MIB, d);
    expect(f.before).toBe('1.0');
    expect(f.title).toMatch(/^Overhead: 0\.29 GiB, measured on this rig \(the estimate before: 1\.00 GiB/);
    const margin = devicePlan(gpuSpec(0), { overhead_bytes: 400 * MIB });
    expect(partFigure('overhead', 'Overhead', 400 * MIB, margin).before).toBeNull();
  });
});

describe('uncorrectedComputeNote', () => {
  it('names ours before the correction in the dry-run table, only where it differs', () => {
    expect(uncorrectedComputeNote({ compute_bytes: 73 * MIB, compute_estimate_bytes: 100 * MIB })).toBe('ours before this rig’s correction: 100 MiB');
    expect(uncorrectedComputeNote({ compute_bytes: 73 * MIB, compute_estimate_bytes: 73 * MIB })).toBeNull();
    expect(uncorrectedComputeNote({ compute_bytes: 73 * MIB })).toBeNull();
  });
});

describe('modelCalibration', () => {
  const list: Calibration[] = [
    record({ backend: 'cpu', device_model: 'CPU' }, { at_ms: NOW - 3 * HOUR, off_by_percent: -3 }),
    record({}, { at_ms: NOW - HOUR, off_by_percent: 7.25 }),
    record({ architecture: 'qwen3moe' }, { at_ms: NOW - 60_000, off_by_percent: 40 }),
  ];

  it('shows the newest check of the model’s architecture, whatever the order', () => {
    const v = modelCalibration(list, 'llama', NOW)!;
    expect(v.text).toBe('estimate off by +7.3 % on this rig last time');
    expect(v.off).toBe('+7.3 %');
    const lines = v.title.split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[1]).toBe('NVIDIA GeForce RTX 3090 (cuda): +7.3 % · llama.cpp dry run, 1 h 0 min ago · compute × 0.73 · overhead 300 MiB measured');
    expect(lines[2]).toMatch(/^CPU \(cpu\): −3 % · llama.cpp dry run, 3 h 0 min ago/);
  });

  it('is nothing without a record of the architecture, or without an architecture', () => {
    expect(modelCalibration(list, 'gemma3', NOW)).toBeNull();
    expect(modelCalibration(list, null, NOW)).toBeNull();
    expect(modelCalibration([], 'llama', NOW)).toBeNull();
  });
});
