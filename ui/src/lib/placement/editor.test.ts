// The editor's state flow against a scripted daemon: the first plan, a move becoming new options
// in the next request, the automatic placer's options becoming the editable ones, and errors
// landing where the user looks (the paste box for a pasted command).

import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { PlanRequest, PlanResponse } from '../api/types';
import { cpuSpec, devicePlan, gpuSpec, options, response } from '../../test/plans';

const calls: { path: 'plan' | 'parse'; body: unknown }[] = [];
let presets: { id: string; name: string; source: string; devices: unknown[] }[] = [];
let answer: (path: 'plan' | 'parse', body: unknown) => Promise<PlanResponse>;

vi.mock('../api/client', async (orig) => {
  const real = await orig<typeof import('../api/client')>();
  return {
    ...real,
    api: {
      plan: (body: unknown) => {
        calls.push({ path: 'plan', body });
        return answer('plan', body);
      },
      parsePlan: (body: unknown) => {
        calls.push({ path: 'parse', body });
        return answer('parse', body);
      },
      rigs: async () => presets,
      rigLinks: async () => [
        { id: '1gbe', link: { name: '1 GbE', throughput_bytes_per_s: 117_625_000, latency_s: 0.00015 } },
        { id: '2.5gbe', link: { name: '2.5 GbE', throughput_bytes_per_s: 293_750_000, latency_s: 0.00012 } },
      ],
    },
  };
});

const { PlacementEditor, defaultOptions, DEFAULT_MARGINS } = await import('./editor.svelte');
const { ApiError } = await import('../api/client');

/** The daemon's plan for 8 layers on two cards, following the options' tensor split and experts. */
function planFor(body: PlanRequest): PlanResponse {
  const o = body.auto
    ? options({ tensor_split: [4, 5], overrides: [{ pattern: String.raw`blk\.(1|2)\.ffn_.*_exps`, device: { kind: 'gpu', index: 0 } }, { pattern: String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps`, device: { kind: 'cpu' } }] })
    : body.options!;
  const onGpu1 = o.overrides.some((x) => x.pattern.includes('7') && x.device.kind === 'gpu' && x.device.index === 1);
  return response(
    [
      devicePlan(gpuSpec(0), { layers: [0, 1, 2, 3], expert_layers: [1, 2] }),
      devicePlan(gpuSpec(1), { layers: [4, 5, 6, 7], expert_layers: onGpu1 ? [7] : [] }),
      devicePlan(cpuSpec(), { expert_layers: onGpu1 ? [3, 4, 5, 6] : [3, 4, 5, 6, 7] }),
    ],
    o,
    8,
  );
}

/** Lets pending promise chains settle (no timers, so it works under fake timers too). */
const flush = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

beforeEach(() => {
  calls.length = 0;
  presets = [];
  answer = async (_p, body) => planFor(body as PlanRequest);
});

describe('PlacementEditor', () => {
  it('plans with another box over a link, and moves blocks onto its lent devices by -dev, -ts and -ot', async () => {
    presets = [
      { id: '4x3090', name: '4× RTX 3090', source: '', devices: [] },
      { id: '2x3090', name: '2× RTX 3090', source: '', devices: [] },
    ];
    const ed = new PlacementEditor();
    ed.open('/m/glm.gguf', '4x3090');
    await flush();
    ed.addBox();
    await flush();
    let sent = calls.at(-1)!.body as PlanRequest;
    expect(sent.rig).toEqual({ preset: '4x3090', also: [{ preset: '2x3090', link: '2.5gbe' }] });
    ed.setBox(0, { preset: '2x3090', link: '1gbe' });
    await flush();
    sent = calls.at(-1)!.body as PlanRequest;
    expect(sent.rig).toEqual({ preset: '4x3090', also: [{ preset: '2x3090', link: '1gbe' }] });
    expect(sent.options?.rpc_servers).toEqual([]);

    // The daemon's plan across the boxes: layers 0–1 on RPC0, 2 on RPC1, 3–5 on CUDA0, 6–7 on CUDA1.
    const rpc = (index: number) => ({ kind: 'rpc' as const, index });
    const servers = [{ endpoint: 'box2:50052', devices: 2 }];
    const pasted = options({ rpc_servers: servers, devices: [rpc(0), rpc(1), { kind: 'gpu', index: 0 }, { kind: 'gpu', index: 1 }], tensor_split: [2, 1, 3, 3] });
    answer = async (_p, body) => {
      const o = (body as PlanRequest).options ?? pasted;
      const r = response(
        [
          devicePlan(gpuSpec(0), { layers: [3, 4, 5], expert_layers: [3, 4, 5] }),
          devicePlan(gpuSpec(1), { layers: [6, 7], expert_layers: [6, 7] }),
          devicePlan(gpuSpec(0, { id: rpc(0), name: 'RPC0 · GPU 0 · RTX 3090 · on box 2' }), { layers: [0, 1], expert_layers: [1] }),
          devicePlan(gpuSpec(1, { id: rpc(1), name: 'RPC1 · GPU 1 · RTX 3090 · on box 2' }), { layers: [2], expert_layers: [2] }),
          devicePlan(cpuSpec()),
        ],
        o,
        8,
      );
      r.boxes = [{ name: 'box 2', endpoint: 'box2:50052', link: { name: '1 GbE', throughput_bytes_per_s: 117_625_000, latency_s: 0.00015 }, devices: [rpc(0), rpc(1)] }];
      return r;
    };
    await ed.paste('llama-server -m /m/glm.gguf --rpc box2:50052 -dev RPC0,RPC1,CUDA0,CUDA1 -ts 2,1,3,3');
    expect(ed.error).toBeNull();
    expect(ed.pasteError).toBeNull();
    expect(ed.layout!.layers.slice(0, 3)).toEqual(['rpc-0', 'rpc-0', 'rpc-1']);
    ed.move(['L2'], 'rpc-0');
    expect(ed.layout!.layers[2]).toBe('rpc-0');
    expect(ed.error).toBeNull();
    await new Promise((resolve) => setTimeout(resolve, 400));
    await flush();
    sent = calls.at(-1)!.body as PlanRequest;
    expect(sent.options!.tensor_split).toEqual([3, 0, 3, 3]);
    expect(sent.options!.rpc_servers).toEqual(servers);
    expect(sent.options!.devices).toEqual([rpc(0), rpc(1), { kind: 'gpu', index: 0 }, { kind: 'gpu', index: 1 }]);
    // Layer 2's experts stay on RPC1 until they are moved too.
    expect(sent.options!.overrides).toEqual([{ pattern: String.raw`blk\.2\.ffn_.*_exps`, device: rpc(1) }]);

    // A plan that keeps the model here: the first move onto a lent device names the box's server.
    ed.options = { ...ed.options, rpc_servers: [], devices: [], tensor_split: [] };
    ed.request(true);
    await flush();
    ed.move(['E7'], 'rpc-1');
    await new Promise((resolve) => setTimeout(resolve, 400));
    await flush();
    sent = calls.at(-1)!.body as PlanRequest;
    expect(sent.options!.rpc_servers).toEqual(servers);
    // Layer 7's experts join the entry that keeps layer 2's on RPC1; the rest stays here.
    expect(sent.options!.overrides).toEqual([{ pattern: String.raw`blk\.(2|7)\.ffn_.*_exps`, device: rpc(1) }]);
    expect(sent.options!.devices).toEqual([{ kind: 'gpu', index: 0 }, { kind: 'gpu', index: 1 }, rpc(0), rpc(1)]);
    expect(sent.options!.tensor_split).toEqual([5, 4, 0, 0]);

    ed.setBox(0, null);
    await flush();
    expect((calls.at(-1)!.body as PlanRequest).rig).toBe('4x3090');
  });

  it('opens a fit verdict as it was planned: the automatic placement at its context, from the defaults', async () => {
    const ed = new PlacementEditor();
    ed.open('/m/glm.gguf', 'live');
    await flush();
    ed.setMargins({ ram_reserve_bytes: 2 * 1024 ** 3 });
    ed.setOptions({ cache_type_k: 'q8_0' });
    ed.open('/m/glm.gguf', 'live', { auto: true, context: 131072 });
    await flush();
    const sent = calls.at(-1)!.body as PlanRequest;
    expect(sent.auto).toBe(true);
    expect(sent.rig).toBe('live');
    expect(sent.options).toEqual({ ...defaultOptions(), context: 131072 });
    expect(sent.margins).toEqual(DEFAULT_MARGINS);
    expect(ed.fromAuto).toBe(true);
  });

  it('plans on open, takes the automatic placement as the editable options, and re-plans a move', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const ed = new PlacementEditor();
      ed.open('/m/glm.gguf', '4x3090');
      await flush();
      expect(calls[0]).toMatchObject({ path: 'plan', body: { model: '/m/glm.gguf', rig: '4x3090' } });
      expect((calls[0]!.body as PlanRequest).auto).toBeUndefined();

      await ed.auto();
      expect((calls.at(-1)!.body as PlanRequest).auto).toBe(true);
      expect(ed.options.overrides).toHaveLength(2);
      expect(ed.fromAuto).toBe(true);
      expect(ed.layout!.experts[7]).toBe('cpu');

      ed.toggle('E7', true);
      expect([...ed.selected]).toEqual(['E7']);
      ed.moveSelected('gpu-1');
      expect(ed.selected.size).toBe(0);
      // The picture moves at once; the daemon is asked after the debounce.
      expect(ed.layout!.experts[7]).toBe('gpu-1');
      const before = calls.length;
      await vi.advanceTimersByTimeAsync(149);
      expect(calls.length).toBe(before);
      await vi.advanceTimersByTimeAsync(1);
      await flush();
      const sent = calls.at(-1)!.body as PlanRequest;
      expect(sent.auto).toBeUndefined();
      expect(sent.options!.overrides.map((o) => o.pattern)).toEqual([
        String.raw`blk\.(1|2)\.ffn_.*_exps`,
        String.raw`blk\.7\.ffn_.*_exps`,
        String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps`,
      ]);
      expect(ed.layout!.experts[7]).toBe('gpu-1');
      expect(ed.fromAuto).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });

  it('shows a pasted command’s error by the paste box, verbatim, and keeps the drawn plan', async () => {
    const ed = new PlacementEditor();
    ed.open('/m/glm.gguf', 'live');
    await flush();
    const drawn = ed.response;
    expect(drawn).not.toBeNull();
    answer = async () => {
      throw new ApiError(400, 'bad_command', "-ot blk\\.(3=CUDA0: the pattern is not a valid regular expression");
    };
    await ed.paste("llama-server -m /m/glm.gguf -ot 'blk\\.(3=CUDA0'");
    expect(calls.at(-1)).toMatchObject({ path: 'parse', body: { rig: 'live' } });
    expect(ed.pasteError).toEqual({ code: 'bad_command', message: "-ot blk\\.(3=CUDA0: the pattern is not a valid regular expression" });
    expect(ed.error).toBeNull();
    expect(ed.response).toBe(drawn);
  });

  it('draws a pasted command and takes its options, model included', async () => {
    const ed = new PlacementEditor();
    ed.open('/m/glm.gguf', 'live');
    await flush();
    answer = async () => {
      const r = planFor({ model: '/other/x.gguf', options: options({ n_gpu_layers: 99 }) });
      r.parsed = { program: 'llama-server', model: '/other/x.gguf', options: r.report.options, other_args: ['--host', '0.0.0.0'], notes: ['no -np'] };
      return r;
    };
    await ed.paste('llama-server -m /other/x.gguf -ngl 99 --host 0.0.0.0');
    expect(ed.pasted?.parsed?.notes).toEqual(['no -np']);
    expect(ed.options.n_gpu_layers).toBe(99);
    expect(ed.model).toBe('/other/x.gguf');
  });

  it('reports an answer it cannot read instead of drawing it', async () => {
    answer = async () => ({ nonsense: true }) as unknown as PlanResponse;
    const ed = new PlacementEditor();
    ed.open('/m/glm.gguf', 'live');
    await flush();
    expect(ed.response).toBeNull();
    expect(ed.error?.code).toBe('bad_answer');
  });
});
