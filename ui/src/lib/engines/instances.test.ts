// Instances page and "Save as launch profile" helpers.

import { describe, expect, it } from 'vitest';
import type { EngineBuild, GangStatus, GpuSnapshot, InstanceView, LogLine, PlanResponse } from '../api/types';
import {
  speculationLine,
  usesSpeculation,
  BUILD_LINES_KEPT,
  buildActive,
  causeLabel,
  defaultProfileName,
  emptyBuild,
  endpointUrl,
  formatUptime,
  isRunning,
  liveUptime,
  memoryRows,
  mergeLogs,
  phaseLabel,
  phaseTone,
  plannedMemoryFromPlan,
  profileBody,
  startReportLines,
  serveFormError,
  serveProfileBody,
  gpuComputeCapabilities,
  defaultBackend,
  offersGpuBuild,
  profileFormError,
  reduceBuild,
  gangLines,
  mayHeadGang,
} from './instances';
import { defaultOptions } from '../placement/editor.svelte';

const GIB = 1024 ** 3;

describe('phase labels', () => {
  it('shows load progress as a percentage, clamped', () => {
    expect(phaseLabel({ phase: 'loading', progress: 0.4 })).toBe('loading 40%');
    expect(phaseLabel({ phase: 'loading', progress: 1.7 })).toBe('loading 100%');
    expect(phaseLabel({ phase: 'loading', progress: null })).toBe('loading');
    expect(phaseLabel({ phase: 'ready', progress: 0.4 })).toBe('ready');
  });
  it('keeps an unknown phase from a newer daemon', () => {
    expect(phaseLabel({ phase: 'paused' })).toBe('paused');
    expect(phaseTone('paused')).toBe('muted');
  });
  it('tones and running', () => {
    expect(phaseTone('ready')).toBe('ok');
    expect(phaseTone('crashed')).toBe('bad');
    expect(isRunning('loading')).toBe(true);
    expect(isRunning('stopping')).toBe(false);
    expect(isRunning('crashed')).toBe(false);
  });
  it('names crash causes', () => {
    expect(causeLabel('out_of_gpu_memory')).toBe('out of GPU memory');
    expect(causeLabel('port_in_use')).toBe('port in use');
    expect(causeLabel('brand_new_cause')).toBe('brand new cause');
    expect(causeLabel(null)).toBe('unknown cause');
  });
});

describe('uptime', () => {
  it('formats seconds, minutes, hours and days', () => {
    expect(formatUptime(null)).toBe('—');
    expect(formatUptime(999)).toBe('0s');
    expect(formatUptime(42_000)).toBe('42s');
    expect(formatUptime(5 * 60_000 + 3_000)).toBe('5m 03s');
    expect(formatUptime(3 * 3_600_000 + 7 * 60_000)).toBe('3h 07m');
    expect(formatUptime(2 * 86_400_000 + 4 * 3_600_000)).toBe('2d 4h');
  });
  it('advances only while running', () => {
    expect(liveUptime({ uptime_ms: 5000, phase: 'ready' }, 1000, 4000)).toBe(8000);
    expect(liveUptime({ uptime_ms: 5000, phase: 'stopped' }, 1000, 4000)).toBe(5000);
    expect(liveUptime({ uptime_ms: null, phase: 'starting' }, 1000, 4000)).toBeNull();
  });
});

describe('endpointUrl', () => {
  it('links the engine on its own host and port', () => {
    expect(endpointUrl({ host: '127.0.0.1', port: 38211 })).toBe('http://127.0.0.1:38211/');
    expect(endpointUrl({ host: '0.0.0.0', port: 8080 }, 'rig.lan')).toBe('http://rig.lan:8080/');
    expect(endpointUrl({ host: '::1', port: 8080 })).toBe('http://[::1]:8080/');
    expect(endpointUrl({ host: '127.0.0.1', port: null })).toBeNull();
  });
});

describe('memoryRows', () => {
  it('puts planned and measured side by side per GPU, summing pids', () => {
    const v: Pick<InstanceView, 'planned_memory' | 'measured_memory'> = {
      planned_memory: [
        { gpu: 1, bytes: 10 * GIB },
        { gpu: 0, bytes: 20 * GIB },
      ],
      measured_memory: [
        { gpu: 0, pid: 1, bytes: 18 * GIB },
        { gpu: 0, pid: 2, bytes: 1 * GIB },
        { gpu: 2, pid: 1, bytes: 2 * GIB },
      ],
    };
    expect(memoryRows(v)).toEqual([
      { gpu: 0, planned: 20 * GIB, measured: 19 * GIB, delta: -1 * GIB },
      { gpu: 1, planned: 10 * GIB, measured: null, delta: null },
      { gpu: 2, planned: null, measured: 2 * GIB, delta: null },
    ]);
  });
  it('is empty for a CPU engine', () => {
    expect(memoryRows({ planned_memory: [], measured_memory: [] })).toEqual([]);
  });
});

describe('reduceBuild', () => {
  it('follows the steps and keeps the last line', () => {
    let s = emptyBuild();
    expect(buildActive(s)).toBe(false);
    s = reduceBuild(s, { build_id: 'b1', step: 'fetch', fraction: 0.1, line: 'fetching' });
    s = reduceBuild(s, { build_id: 'b1', step: 'compile', fraction: null, line: '[10/200] x.c' });
    expect(s).toMatchObject({ step: 'compile', fraction: 0.1, line: '[10/200] x.c', done: false, failed: false });
    expect(buildActive(s)).toBe(true);
    s = reduceBuild(s, { build_id: 'b1', step: 'done', fraction: null, line: null });
    expect(s).toMatchObject({ done: true, fraction: 1, line: '[10/200] x.c' });
    expect(buildActive(s)).toBe(false);
  });
  it('keeps the last lines for a failure and starts over for a new build', () => {
    let s = emptyBuild();
    for (let i = 0; i < BUILD_LINES_KEPT + 5; i++) s = reduceBuild(s, { build_id: 1, step: 'compile', fraction: 0.5, line: `l${i}` });
    s = reduceBuild(s, { build_id: 1, step: 'failed', fraction: null, line: 'ninja: build stopped' });
    expect(s.failed).toBe(true);
    expect(s.lines).toHaveLength(BUILD_LINES_KEPT);
    expect(s.lines.at(-1)).toBe('ninja: build stopped');
    s = reduceBuild(s, { build_id: 2, step: 'fetch', fraction: 0, line: 'again' });
    expect(s).toMatchObject({ buildId: 2, failed: false, lines: ['again'] });
  });
});

describe('mergeLogs', () => {
  const l = (seq: number): LogLine => ({ seq, at_ms: seq, stream: 'stdout', text: `t${seq}` });
  it('appends in order without duplicates and keeps the tail', () => {
    const a = [l(1), l(2)];
    expect(mergeLogs(a, [l(2)])).toBe(a);
    expect(mergeLogs(a, [l(4), l(3)]).map((x) => x.seq)).toEqual([1, 2, 3, 4]);
    expect(mergeLogs([], [l(1), l(2), l(3)], 2).map((x) => x.seq)).toEqual([2, 3]);
  });
});

describe('profile from the editor', () => {
  const plan = {
    report: {
      plan: {
        devices: [
          { spec: { id: { kind: 'gpu', index: 0 } }, usage: { weights_bytes: 10, kv_bytes: 2, compute_bytes: 3, overhead_bytes: 4 } },
          { spec: { id: { kind: 'gpu', index: 1 } }, usage: { weights_bytes: 0, kv_bytes: 0, compute_bytes: 0, overhead_bytes: 0 } },
          { spec: { id: { kind: 'cpu' } }, usage: { weights_bytes: 100, kv_bytes: 0, compute_bytes: 0, overhead_bytes: 0 } },
        ],
      },
    },
  } as unknown as PlanResponse;

  it('plans memory for the GPUs that hold something', () => {
    expect(plannedMemoryFromPlan(plan)).toEqual([{ gpu: 0, bytes: 19 }]);
    expect(plannedMemoryFromPlan(null)).toEqual([]);
  });
  it('writes the body with options, model, port and planned memory for a GPU build on the live rig', () => {
    const options = { ...defaultOptions(), context: 8192 };
    const body = profileBody({ name: ' qwen ', engineBuildId: 3, port: '8081' }, '/m/q.gguf', options, plan, 'live', 'cuda');
    expect(body).toEqual({ name: 'qwen', engine_build_id: 3, model: '/m/q.gguf', placement: options, port: 8081, planned_memory: [{ gpu: 0, bytes: 19 }] });
  });
  it('leaves the port and planned memory out for a free port, a CPU build or a preset rig', () => {
    const o = defaultOptions();
    const cpu = profileBody({ name: 'a', engineBuildId: 1, port: '' }, '/m.gguf', o, plan, 'live', 'cpu');
    expect(cpu).toEqual({ name: 'a', engine_build_id: 1, model: '/m.gguf', placement: o });
    expect(profileBody({ name: 'a', engineBuildId: 1, port: '' }, '/m.gguf', o, plan, '4x3090', 'cuda').planned_memory).toBeUndefined();
  });
  it('checks the form', () => {
    expect(profileFormError({ name: '', engineBuildId: 1, port: '' })).toMatch(/name/);
    expect(profileFormError({ name: 'a', engineBuildId: null, port: '' })).toMatch(/engine/);
    expect(profileFormError({ name: 'a', engineBuildId: 1, port: '70000' })).toMatch(/port/);
    expect(profileFormError({ name: 'a', engineBuildId: 1, port: 'x' })).toMatch(/port/);
    expect(profileFormError({ name: 'a', engineBuildId: 1, port: '8080' })).toBeNull();
  });
  it('sends the rigs that lend devices over RPC, one "rig DEVICE,DEVICE" a line, and checks them', () => {
    const o = defaultOptions();
    const form = { name: 'a', engineBuildId: 1, port: '', lenders: ' mini CPU\n\ntower CUDA0,CUDA1 ' };
    expect(profileFormError(form)).toBeNull();
    expect(profileBody(form, '/m.gguf', o, plan, 'live', 'cpu').lenders).toEqual([
      { rig: 'mini', devices: ['CPU'] },
      { rig: 'tower', devices: ['CUDA0', 'CUDA1'] },
    ]);
    expect(profileBody({ ...form, lenders: '' }, '/m.gguf', o, plan, 'live', 'cpu').lenders).toBeUndefined();
    expect(profileFormError({ ...form, lenders: 'mini' })).toMatch(/"mini".*e\.g\. "mini CPU"/);
    expect(profileFormError({ ...form, lenders: 'mini CPU\nmini CUDA0' })).toMatch(/'mini' is listed twice/);
    expect(profileFormError({ ...form, lenders: 'mini CPU;-H' })).toMatch(/device names/);
  });
  it('says a gang\'s phase, its members with their rigs, its restarts and why', () => {
    const gang = {
      name: 'lent',
      phase: 'restarting',
      members: [
        { kind: 'local', instance: 'lent' },
        { kind: 'lease', rig: 'mini', devices: ['CPU'], instance: 'lent.lease1' },
        { kind: 'peer', rig: 'tower', instance: 'big.rank1', seat: { rank: 1, interface: 'eth1' } },
      ],
      restarts: 2,
      message: "waiting to start again until every box is ready: 'mini' cannot be reached",
      exposes: 'nothing beyond the fleet\'s channel',
      since_ms: 0,
    } as unknown as GangStatus;
    expect(gangLines(gang)).toEqual([
      "gang restarting (2 restarts): the head on this rig · CPU lent by 'mini' · rank 1 on 'tower' (eth1)",
      "waiting to start again until every box is ready: 'mini' cannot be reached",
    ]);
    expect(mayHeadGang(['llama-server', '--rpc', '127.0.0.1:4000'])).toBe(true);
    expect(mayHeadGang(['vllm', 'serve', '--nnodes', '2'])).toBe(true);
    expect(mayHeadGang(['llama-server', '-m', 'm.gguf'])).toBe(false);
    expect(gangLines({ ...gang, phase: 'ready', restarts: 1, message: null })).toEqual([
      "gang ready (1 restart): the head on this rig · CPU lent by 'mini' · rank 1 on 'tower' (eth1)",
    ]);
  });
  it('suggests a name from the model file', () => {
    expect(defaultProfileName('/m/Qwen3-8B-Q4_K_M.gguf')).toBe('qwen3-8b-q4_k_m');
    expect(defaultProfileName('/m/GLM 5.2/GLM-5.2-IQ2-00001-of-00006.gguf')).toBe('glm-5.2-iq2');
  });
});

describe('startReportLines', () => {
  const nothing = {
    recovery: { adopted: [], cleaned_up: [], failed: [] as [string, string][] },
    autostart: { started: [], already_running: [], skipped: [] as [string, string][], refused: null },
  };

  it('says nothing when nothing happened at start', () => {
    expect(startReportLines(null)).toEqual([]);
    expect(startReportLines(nothing)).toEqual([]);
  });

  it('lists recovery and autostart outcomes with their tones, refusal last', () => {
    const lines = startReportLines({
      recovery: { adopted: ['glm'], cleaned_up: ['old'], failed: [['stuck', 'permission denied']] },
      autostart: {
        started: ['qwen', 'coder'],
        already_running: ['glm'],
        skipped: [['orphan', 'it uses engine build 9, which is not installed']],
        refused: 'autostart of a, b refused: GPU 1 needs 20.0 GiB, 15.9 GiB free',
      },
    });
    expect(lines.map((l) => l.tone)).toEqual(['info', 'info', 'bad', 'ok', 'info', 'warn', 'bad']);
    const texts = lines.map((l) => l.text);
    expect(texts[0]).toBe('Still running from the last run, taken over: glm');
    expect(texts[2]).toBe('Could not stop stuck, left over from the last run: permission denied');
    expect(texts[3]).toBe('Started automatically: qwen, coder');
    expect(texts[5]).toBe('Autostart skipped orphan: it uses engine build 9, which is not installed');
    expect(texts[6]).toContain('GPU 1 needs 20.0 GiB');
  });
});

describe('build backend choice', () => {
  const gpu = (cc: { major: number; minor: number } | null) => ({ compute_capability: cc }) as unknown as GpuSnapshot;

  it('lists each compute capability once, sorted, and skips GPUs without one', () => {
    const gpus = [gpu({ major: 12, minor: 0 }), gpu({ major: 8, minor: 6 }), gpu(null), gpu({ major: 8, minor: 6 })];
    expect(gpuComputeCapabilities(gpus)).toEqual(['8.6', '12.0']);
    expect(gpuComputeCapabilities(undefined)).toEqual([]);
  });

  it('offers CUDA where NVIDIA GPUs are seen, else the CPU', () => {
    expect(defaultBackend(['8.6'])).toBe('cuda');
    expect(defaultBackend([])).toBe('cpu');
  });

  it('offers a CUDA build while no working llama.cpp build uses the GPUs', () => {
    const build = (backend: string, status = 'ready', kind = 'llama.cpp') =>
      ({ backend, status, kind }) as unknown as EngineBuild;
    // A fresh install from a package: its CPU engine only.
    expect(offersGpuBuild([build('cpu')], ['8.6'])).toBe(true);
    expect(offersGpuBuild([], ['8.6'])).toBe(true);
    expect(offersGpuBuild([build('cpu'), build('cuda')], ['8.6'])).toBe(false);
    expect(offersGpuBuild([build('cuda', 'missing')], ['8.6'])).toBe(true);
    // vLLM uses the GPUs but is not llama.cpp: the offer stays.
    expect(offersGpuBuild([build('cuda', 'ready', 'vllm')], ['8.6'])).toBe(true);
    expect(offersGpuBuild([build('cpu')], [])).toBe(false);
  });
});

describe('serve form (vLLM / SGLang profiles from the Models page)', () => {
  const form = { name: 'qwen3', buildId: 3, context: 0, tensorParallel: 1, gpuShare: 0.9, gpus: '', iface: '', followers: '' };

  it('makes a profile with the model folder, the GPU share and the chosen GPUs in bus order', () => {
    expect(serveProfileBody(form, '/models/Qwen3-8B')).toEqual({
      name: 'qwen3',
      engine_build_id: 3,
      model: '/models/Qwen3-8B',
      placement: { context: 0 },
      gpu_memory_fraction: 0.9,
    });
    const two = serveProfileBody({ ...form, tensorParallel: 2, gpus: ' 2, 3 ', context: 32768 }, '/m');
    expect(two.tensor_parallel).toBe(2);
    expect(two.placement).toEqual({ context: 32768 });
    expect(two.env).toEqual({ CUDA_VISIBLE_DEVICES: '2,3', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' });
  });

  it('names the first problem', () => {
    expect(serveFormError(form, 4)).toBeNull();
    expect(serveFormError({ ...form, name: ' ' }, 4)).toMatch(/name/);
    expect(serveFormError({ ...form, buildId: null }, 4)).toMatch(/install one on the Engines page/);
    expect(serveFormError({ ...form, gpuShare: 1.2 }, 4)).toMatch(/between 0 and 1/);
    expect(serveFormError({ ...form, gpus: '0,7' }, 4)).toMatch(/indices from 0 to 3/);
    expect(serveFormError({ ...form, tensorParallel: 3, gpus: '0,1' }, 4)).toMatch(/needs that many GPUs; 2 are chosen/);
    expect(serveFormError({ ...form, tensorParallel: 8 }, 4)).toMatch(/4 are chosen/);
  });

  it('spans boxes with followers given as "rig interface" lines, on an interface of this rig', () => {
    const across = { ...form, iface: 'eth1', followers: 'mini enp3s0\n  tower eth0 \n' };
    expect(serveFormError(across, 4)).toBeNull();
    expect(serveProfileBody(across, '/m').multi_node).toEqual({
      interface: 'eth1',
      nodes: [
        { peer: 'mini', interface: 'enp3s0' },
        { peer: 'tower', interface: 'eth0' },
      ],
    });
    expect(serveProfileBody(form, '/m').multi_node).toBeUndefined();
    expect(serveFormError({ ...across, iface: '' }, 4)).toMatch(/this rig's interface/);
    expect(serveFormError({ ...across, followers: 'mini' }, 4)).toMatch(/"mini": give the rig's fleet name and its interface/);
    expect(serveFormError({ ...across, followers: 'mini eth0\nmini eth1' }, 4)).toMatch(/'mini' is listed twice/);
    expect(serveFormError({ ...form, iface: 'eth1' }, 4)).toMatch(/at least one follower/);
  });
});


describe('speculative acceptance on the instance', () => {
  const view = { name: 'p', available: true, reason: null, drafted: 171, accepted: 27, drafts: 23, acceptance_rate: 27 / 171, mean_accepted_length: 1 + 27 / 23 };
  it('is shown for instances that draft', () => {
    expect(usesSpeculation(['/llama-server', '--spec-type', 'ngram-mod'])).toBe(true);
    expect(usesSpeculation(['/venv/bin/vllm', 'serve', 'm', '--speculative-config', '{}'])).toBe(true);
    expect(usesSpeculation(['/llama-server', '-m', 'x.gguf'])).toBe(false);
  });
  it('reads as a rate, a count and tokens a step', () => {
    expect(speculationLine(view)).toBe('16 % of 171 drafted tokens accepted · 2.17 tokens a step');
    expect(speculationLine({ ...view, drafted: 0, accepted: 0, acceptance_rate: null, mean_accepted_length: null })).toBe('nothing drafted yet');
    expect(speculationLine({ ...view, available: false, reason: 'the engine is not ready' })).toBe('the engine is not ready');
  });
});
