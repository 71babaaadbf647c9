// Moves in the editor → llama-server flags: experts entries, -ngl/-ts for contiguous layer ranges,
// per-layer entries otherwise, the CPU catch-all kept last, and undo by moving back.

import { describe, expect, it } from 'vitest';
import type { PlacementOptions, TensorOverride } from '../api/types';
import { options as baseOptions, GIB } from '../../test/plans';
import { CPU } from './devices';
import type { Move } from './layout';
import {
  addToGroup,
  applyMoves,
  CPU_CATCH_ALL,
  formatGroup,
  isCatchAll,
  layersMovedByOverrides,
  parseGroup,
  splitFor,
  withoutLayer,
} from './moves';
import { assignLayers, simulate, type PlacementContext } from './simulate';

const cuda = (index: number): TensorOverride['device'] => ({ kind: 'gpu', index });
const cpu: TensorOverride['device'] = { kind: 'cpu' };
const ot = (pattern: string, device: TensorOverride['device']): TensorOverride => ({ pattern, device });
const catchAll = ot(CPU_CATCH_ALL, cpu);

/** 8 layers on two 24 GiB cards; layer 0 is dense, 1–7 have routed experts. */
const ctx: PlacementContext = { nLayer: 8, gpuCapacities: [24 * GIB, 24 * GIB], expertLayers: new Set([1, 2, 3, 4, 5, 6, 7]) };

/** What the automatic placer writes: layers 0–3 on GPU 0, 4–7 (+ output) on GPU 1, the experts
 *  of 1–2 with GPU 0 and of 4–5 with GPU 1, every other expert in CPU RAM. */
const solved: PlacementOptions = baseOptions({
  tensor_split: [4, 5],
  overrides: [ot(String.raw`blk\.(1|2)\.ffn_.*_exps`, cuda(0)), ot(String.raw`blk\.(4|5)\.ffn_.*_exps`, cuda(1)), catchAll],
});

/** Moves blocks, then checks the rules put everything where the user wanted it. */
function move(opts: PlacementOptions, moves: Move[], c: PlacementContext = ctx): PlacementOptions {
  const before = simulate(opts, c);
  const next = applyMoves(opts, c, before, moves);
  const after = simulate(next, c);
  const want = { layers: [...before.layers], experts: [...before.experts] };
  for (const m of moves) (m.kind === 'layer' ? want.layers : want.experts)[m.layer] = m.to;
  expect(after.layers).toEqual(want.layers);
  expect(after.experts).toEqual(want.experts);
  return next;
}

function catchAllIsLast(o: PlacementOptions): boolean {
  const i = o.overrides.findIndex(isCatchAll);
  return i === -1 || i === o.overrides.length - 1;
}

const patterns = (o: PlacementOptions) => o.overrides.map((x) => `${x.pattern}=${x.device.kind === 'gpu' ? 'CUDA' + x.device.index : 'CPU'}`);

describe('the starting point', () => {
  it('is what the daemon would plan', () => {
    const s = simulate(solved, ctx);
    expect(s.layers).toEqual(['gpu-0', 'gpu-0', 'gpu-0', 'gpu-0', 'gpu-1', 'gpu-1', 'gpu-1', 'gpu-1']);
    expect(s.experts).toEqual([null, 'gpu-0', 'gpu-0', CPU, 'gpu-1', 'gpu-1', CPU, CPU]);
  });
});

describe('moving experts', () => {
  it('joins the target card’s entry, keeping the catch-all last', () => {
    const next = move(solved, [{ kind: 'experts', layer: 6, to: 'gpu-1' }]);
    expect(patterns(next)).toEqual([
      String.raw`blk\.(1|2)\.ffn_.*_exps=CUDA0`,
      String.raw`blk\.(4|5|6)\.ffn_.*_exps=CUDA1`,
      String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`,
    ]);
    expect(next.tensor_split).toEqual([4, 5]);
  });

  it('moves between cards by editing both entries', () => {
    const next = move(solved, [{ kind: 'experts', layer: 2, to: 'gpu-1' }]);
    expect(patterns(next)).toEqual([
      String.raw`blk\.1\.ffn_.*_exps=CUDA0`,
      String.raw`blk\.(2|4|5)\.ffn_.*_exps=CUDA1`,
      String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`,
    ]);
  });

  it('to the CPU only drops the layer from its entry: the catch-all takes it', () => {
    const next = move(solved, [{ kind: 'experts', layer: 4, to: CPU }]);
    expect(patterns(next)).toEqual([
      String.raw`blk\.(1|2)\.ffn_.*_exps=CUDA0`,
      String.raw`blk\.5\.ffn_.*_exps=CUDA1`,
      String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`,
    ]);
  });

  it('adds a new entry before the catch-all for a card that has none', () => {
    const emptied = move(solved, [
      { kind: 'experts', layer: 1, to: CPU },
      { kind: 'experts', layer: 2, to: CPU },
    ]);
    expect(patterns(emptied)).toEqual([String.raw`blk\.(4|5)\.ffn_.*_exps=CUDA1`, String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`]);
    const next = move(emptied, [{ kind: 'experts', layer: 7, to: 'gpu-0' }]);
    expect(patterns(next)).toEqual([
      String.raw`blk\.(4|5)\.ffn_.*_exps=CUDA1`,
      String.raw`blk\.7\.ffn_.*_exps=CUDA0`,
      String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`,
    ]);
    expect(catchAllIsLast(next)).toBe(true);
  });

  it('without a catch-all, a card’s experts can be sent to the CPU explicitly', () => {
    const plain = baseOptions({ tensor_split: [4, 5] });
    const next = move(plain, [{ kind: 'experts', layer: 2, to: CPU }]);
    expect(patterns(next)).toEqual([String.raw`blk\.2\.ffn_.*_exps=CPU`]);
  });

  it('ignores a dense layer’s missing experts and moves to where a block already is', () => {
    expect(applyMoves(solved, ctx, simulate(solved, ctx), [{ kind: 'experts', layer: 0, to: 'gpu-1' }])).toBe(solved);
    expect(applyMoves(solved, ctx, simulate(solved, ctx), [{ kind: 'experts', layer: 1, to: 'gpu-0' }])).toBe(solved);
  });

  it('undoes exactly when moved back', () => {
    for (const [layer, to] of [[6, 'gpu-1'], [2, 'gpu-1'], [4, CPU], [3, 'gpu-0']] as const) {
      const there = move(solved, [{ kind: 'experts', layer, to }]);
      expect(there).not.toEqual(solved);
      const back = move(there, [{ kind: 'experts', layer, to: simulate(solved, ctx).experts[layer]! }]);
      expect(back).toEqual(solved);
    }
  });
});

describe('moving whole layers', () => {
  it('at a range boundary changes -ts, not -ot', () => {
    const next = move(solved, [{ kind: 'layer', layer: 3, to: 'gpu-1' }]);
    expect(next.tensor_split).toEqual([3, 6]);
    expect(next.n_gpu_layers).toBeNull();
    expect(next.overrides).toEqual(solved.overrides);
  });

  it('first layers to the CPU lowers -ngl', () => {
    const next = move(solved, [{ kind: 'layer', layer: 0, to: CPU }]);
    expect(next.n_gpu_layers).toBe(8);
    expect(next.tensor_split).toEqual([3, 5]);
    const all = move(solved, [0, 1, 2, 3, 4, 5, 6, 7].map((layer) => ({ kind: 'layer' as const, layer, to: CPU })));
    expect(all.n_gpu_layers).toBe(0);
  });

  it('a range given to one card empties the other with a zero share', () => {
    const next = move(solved, [0, 1, 2, 3].map((layer) => ({ kind: 'layer' as const, layer, to: 'gpu-1' })));
    expect(next.tensor_split).toEqual([0, 9]);
    expect(next.overrides).toEqual(solved.overrides);
  });

  it('from the middle of a range becomes a per-layer entry that leaves the experts in place', () => {
    const next = move(solved, [{ kind: 'layer', layer: 6, to: 'gpu-0' }]);
    expect(next.tensor_split).toEqual([4, 5]);
    expect(patterns(next)).toEqual([
      String.raw`blk\.(1|2)\.ffn_.*_exps=CUDA0`,
      String.raw`blk\.(4|5)\.ffn_.*_exps=CUDA1`,
      String.raw`blk\.6\.ffn_.*_exps=CPU`,
      String.raw`blk\.6\.=CUDA0`,
      String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`,
    ]);
    expect(layersMovedByOverrides(next)).toEqual([6]);
    // The layer's KV cache stays with its -ts card.
    expect(assignLayers(8, ctx.gpuCapacities, next).layers[6]).toBe('gpu-1');
  });

  it('undoes a per-layer entry exactly', () => {
    const there = move(solved, [{ kind: 'layer', layer: 6, to: 'gpu-0' }]);
    expect(move(there, [{ kind: 'layer', layer: 6, to: 'gpu-1' }])).toEqual(solved);
  });

  it('undoes a boundary move exactly', () => {
    const there = move(solved, [{ kind: 'layer', layer: 4, to: 'gpu-0' }]);
    expect(there.tensor_split).toEqual([5, 4]);
    expect(move(there, [{ kind: 'layer', layer: 4, to: 'gpu-1' }])).toEqual(solved);
  });

  it('groups several per-layer moves per card and drops them once a split says it', () => {
    const dense: PlacementContext = { nLayer: 8, gpuCapacities: [24 * GIB, 24 * GIB], expertLayers: new Set() };
    const o = baseOptions({ tensor_split: [4, 5] });
    const a = move(o, [{ kind: 'layer', layer: 1, to: 'gpu-1' }, { kind: 'layer', layer: 2, to: 'gpu-1' }], dense);
    expect(patterns(a)).toEqual([String.raw`blk\.(1|2)\.=CUDA1`]);
    // Layers 1–3 on GPU 1 and 0 alone on GPU 0 is a split again: no -ot left.
    const b = move(a, [{ kind: 'layer', layer: 3, to: 'gpu-1' }], dense);
    expect(b.overrides).toEqual([]);
    expect(b.tensor_split).toEqual([1, 8]);
  });

  it('leaves -sm none for a layer split when a layer leaves the main card', () => {
    const dense: PlacementContext = { nLayer: 4, gpuCapacities: [24 * GIB, 24 * GIB], expertLayers: new Set() };
    const o = baseOptions({ split_mode: 'none', main_gpu: 0 });
    const next = move(o, [{ kind: 'layer', layer: 3, to: 'gpu-1' }], dense);
    expect(next.split_mode).toBe('layer');
    expect(next.tensor_split).toEqual([3, 2]);
  });
});

describe('the seed’s -ncmoe command', () => {
  const ncmoe = (n: number) =>
    Array.from({ length: n }, (_, i) => ot(String.raw`blk\.` + i + String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps`, cpu));

  it('reads its per-layer entries as editable', () => {
    expect(parseGroup(ncmoe(3)[2]!.pattern)).toEqual({ kind: 'experts', layers: [2], suffix: String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps` });
  });

  it('moving a kept-on-GPU expert block to another card adds an entry for that card', () => {
    const o = baseOptions({ n_gpu_layers: 99, overrides: ncmoe(5) });
    const s = simulate(o, ctx);
    expect(s.experts.slice(5)).toEqual(['gpu-1', 'gpu-1', 'gpu-1']);
    const next = move(o, [{ kind: 'experts', layer: 6, to: 'gpu-0' }]);
    expect(patterns(next).at(-1)).toBe(String.raw`blk\.6\.ffn_.*_exps=CUDA0`);
    expect(next.overrides.slice(0, 5)).toEqual(o.overrides);
  });
});

describe('pattern helpers', () => {
  it('format and parse layer lists', () => {
    expect(formatGroup([9, 3, 4, 3], String.raw`\.ffn_.*_exps`)).toBe(String.raw`blk\.(3|4|9)\.ffn_.*_exps`);
    expect(formatGroup([12], String.raw`\.`)).toBe(String.raw`blk\.12\.`);
    expect(parseGroup(String.raw`blk\.(3|4|9)\.ffn_.*_exps`)).toEqual({ kind: 'experts', layers: [3, 4, 9], suffix: String.raw`\.ffn_.*_exps` });
    expect(parseGroup(String.raw`blk\.(3|4)\.`)).toEqual({ kind: 'layer', layers: [3, 4], suffix: String.raw`\.` });
    expect(parseGroup(String.raw`blk\.(3|4)\.attn`)).toBeNull();
    expect(parseGroup(String.raw`blk\.[0-9]\.ffn_.*_exps`)).toBeNull();
  });

  it('recognises catch-alls', () => {
    expect(isCatchAll(catchAll)).toBe(true);
    expect(isCatchAll(ot('exps', cpu))).toBe(true);
    expect(isCatchAll(ot('exps', cuda(0)))).toBe(false);
    expect(isCatchAll(ot(String.raw`blk\.1\.ffn_.*_exps`, cpu))).toBe(false);
  });

  it('withoutLayer drops emptied entries; addToGroup never lands behind the catch-all', () => {
    expect(withoutLayer([ot(String.raw`blk\.4\.ffn_.*_exps`, cuda(1)), catchAll], 'experts', 4)).toEqual([catchAll]);
    const added = addToGroup([catchAll], 'experts', 7, 'gpu-1');
    expect(added.map((x) => x.pattern)).toEqual([String.raw`blk\.7\.ffn_.*_exps`, CPU_CATCH_ALL]);
    const layer = addToGroup([catchAll], 'layer', 7, 'gpu-1');
    expect(layer.map((x) => x.pattern)).toEqual([String.raw`blk\.7\.`, CPU_CATCH_ALL]);
  });

  it('splitFor only writes contiguous ranges in GPU order', () => {
    const two = ['gpu-0', 'gpu-1'];
    expect(splitFor(['gpu-0', 'gpu-0', 'gpu-1'], two)).toEqual({ n_gpu_layers: null, tensor_split: [2, 2] });
    expect(splitFor([CPU, 'gpu-1', 'gpu-1'], ['gpu-0', 'gpu-1', 'gpu-2'])).toEqual({ n_gpu_layers: 3, tensor_split: [0, 3, 0] });
    expect(splitFor(['gpu-1', 'gpu-0'], two)).toBeNull();
    expect(splitFor(['gpu-0', CPU, 'gpu-0'], two)).toBeNull();
    expect(splitFor([CPU, CPU], two)).toEqual({ n_gpu_layers: 0, tensor_split: null });
    // In llama.cpp's device order, lent devices first: positions follow the order given.
    expect(splitFor(['rpc-0', 'gpu-0', 'gpu-1'], ['rpc-0', 'rpc-1', 'gpu-0', 'gpu-1'])).toEqual({ n_gpu_layers: null, tensor_split: [1, 0, 1, 2] });
    expect(splitFor(['gpu-0', 'rpc-0'], ['rpc-0', 'gpu-0'])).toBeNull();
  });
});

describe('across boxes (devices another box lends, RPC0… in llama.cpp)', () => {
  const rpc = (index: number): TensorOverride['device'] => ({ kind: 'rpc', index });
  const servers = [{ endpoint: 'box2:50052', devices: 2 }];
  /** The two local cards, and a second box lending two more over llama.cpp RPC. */
  const rig: PlacementContext = { ...ctx, lentCapacities: [24 * GIB, 24 * GIB], servers };
  /** What the automatic placer writes across boxes: -dev with the lent devices first, layers
   *  0–1 on RPC0, 2 on RPC1, 3–5 on CUDA0, 6–7 and the output on CUDA1. */
  const across: PlacementOptions = baseOptions({
    rpc_servers: servers,
    devices: [rpc(0), rpc(1), cuda(0), cuda(1)],
    tensor_split: [2, 1, 3, 3],
    overrides: [catchAll],
  });

  it('reads -dev and -ts in llama.cpp device order, lent devices first when -dev is absent', () => {
    const s = simulate(across, rig);
    expect(s.layers).toEqual(['rpc-0', 'rpc-0', 'rpc-1', 'gpu-0', 'gpu-0', 'gpu-0', 'gpu-1', 'gpu-1']);
    expect(s.experts[1]).toBe(CPU);
    const noDev = simulate({ ...across, devices: [] }, rig);
    expect(noDev.layers).toEqual(s.layers);
    // Without --rpc the lent devices hold nothing: -ts covers this box's cards alone.
    const here = simulate(baseOptions({ tensor_split: [4, 5] }), rig);
    expect(here.layers).toEqual(['gpu-0', 'gpu-0', 'gpu-0', 'gpu-0', 'gpu-1', 'gpu-1', 'gpu-1', 'gpu-1']);
  });

  it('a layer dragged onto a lent device next to its range changes -ts in -dev order', () => {
    const next = move(across, [{ kind: 'layer', layer: 2, to: 'rpc-0' }], rig);
    expect(next.tensor_split).toEqual([3, 0, 3, 3]);
    expect(next.devices).toEqual(across.devices);
    expect(next.overrides).toEqual([catchAll]);
    const back = move(next, [{ kind: 'layer', layer: 2, to: 'rpc-1' }], rig);
    expect(back.tensor_split).toEqual([2, 1, 3, 3]);
  });

  it('a layer dragged from a local card onto a lent one reorders -dev when that keeps the ranges whole', () => {
    const next = move(across, [{ kind: 'layer', layer: 3, to: 'rpc-1' }], rig);
    expect(next.tensor_split).toEqual([2, 2, 2, 3]);
    // The last layer onto RPC1: RPC1's range follows CUDA1's, so RPC1 comes after it in -dev.
    const last = move(baseOptions({ rpc_servers: servers, devices: [rpc(0), rpc(1), cuda(0), cuda(1)], tensor_split: [0, 0, 4, 5] }), [{ kind: 'layer', layer: 7, to: 'rpc-1' }], rig);
    expect(last.devices).toEqual([cuda(0), cuda(1), rpc(1), rpc(0)]);
    expect(last.tensor_split).toEqual([4, 3, 2, 0]);
    // The layer's experts stay where they were until they are moved too.
    expect(last.overrides).toEqual([ot(String.raw`blk\.7\.ffn_.*_exps`, cuda(1))]);
  });

  it('a layer that cannot join a range goes by a per-layer entry to the lent device', () => {
    const next = move(across, [{ kind: 'layer', layer: 7, to: 'rpc-0' }], rig);
    expect(next.overrides).toContainEqual(ot(String.raw`blk\.7\.`, rpc(0)));
    expect(next.tensor_split).toEqual(across.tensor_split);
    expect(catchAllIsLast(next)).toBe(true);
  });

  it('the first move onto a lent device adds the --rpc servers and keeps every other layer where it was', () => {
    const next = move(solved, [{ kind: 'experts', layer: 7, to: 'rpc-1' }], rig);
    expect(next.rpc_servers).toEqual(servers);
    expect(next.devices).toEqual([cuda(0), cuda(1), rpc(0), rpc(1)]);
    expect(next.tensor_split).toEqual([4, 5, 0, 0]);
    expect(next.overrides.at(-2)).toEqual(ot(String.raw`blk\.7\.ffn_.*_exps`, rpc(1)));
    expect(catchAllIsLast(next)).toBe(true);

    const layer = move(baseOptions(), [{ kind: 'layer', layer: 0, to: 'rpc-0' }], rig);
    expect(layer.rpc_servers).toEqual(servers);
    expect(layer.devices).toEqual([rpc(0), cuda(0), cuda(1), rpc(1)]);
    expect(layer.tensor_split).toEqual([1, 4, 4, 0]);
  });

  it('on this box alone nothing about lent devices is written', () => {
    const next = move(solved, [{ kind: 'layer', layer: 4, to: 'gpu-0' }], rig);
    expect(next.rpc_servers ?? []).toEqual([]);
    expect(next.devices ?? []).toEqual([]);
    expect(next.tensor_split).toEqual([5, 4]);
  });
});
