// The instant preview's layer split against the Rust planner: `assignLayers` must give, for
// every case in the shared vectors (written by crates/placement/tests/layer_split_vectors.rs
// from the planner's own `assign_layers`), exactly the planner's devices.

import { describe, expect, it } from 'vitest';
import vectors from '../../test/vectors/layer-split.json';
import type { PlacementOptions } from '../api/types';
import { assignLayers } from './simulate';

interface Case {
  n_layer: number;
  gpu_free_bytes: number[];
  options: Pick<PlacementOptions, 'n_gpu_layers' | 'tensor_split' | 'split_mode' | 'main_gpu'>;
  /** Runs of consecutive layers on one device. */
  layers: [string, number][];
  output: string;
}

function expand(runs: [string, number][]): string[] {
  return runs.flatMap(([device, n]) => Array<string>(n).fill(device));
}

describe('layer split shared with the Rust planner', () => {
  const cases = vectors.cases as Case[];

  it('has the vectors', () => {
    expect(cases.length).toBeGreaterThan(500);
  });

  it('assigns every layer and the output as the planner does', () => {
    for (const c of cases) {
      const got = assignLayers(c.n_layer, c.gpu_free_bytes, c.options);
      const want = { layers: expand(c.layers), output: c.output };
      expect(got, JSON.stringify({ n_layer: c.n_layer, gpus: c.gpu_free_bytes, options: c.options })).toEqual(want);
    }
  });
});
