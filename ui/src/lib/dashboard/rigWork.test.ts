import { describe, expect, it } from 'vitest';
import type { DownloadView, GatewayModel, InstanceView } from '../api/types';
import { lastReplyText, nextStep, rigWork, type WorkInput } from './rigWork';

const GIB = 1024 ** 3;

function instance(name: string, phase: string, extra: Partial<InstanceView> = {}): InstanceView {
  return {
    name,
    phase,
    pid: 1,
    started_at_ms: 0,
    host: '127.0.0.1',
    port: 8080,
    uptime_ms: 1000,
    planned_memory: [],
    measured_memory: [],
    ...extra,
  };
}

function gatewayModel(name: string, extra: Partial<GatewayModel> = {}): GatewayModel {
  return {
    name,
    aliases: [],
    state: 'ready',
    progress: null,
    on_demand: false,
    pinned: false,
    idle_ttl_s: null,
    max_concurrent: null,
    in_flight: 0,
    last_used_at_ms: null,
    ...extra,
  };
}

function download(id: number, state: string, done: number, total: number): DownloadView {
  return {
    id,
    repo: 'org/model-GGUF',
    revision: 'main',
    label: 'Q4_K_M',
    files: 1,
    state,
    error: null,
    progress: { total_bytes: total, done_bytes: done, files_total: 1, files_done: 0, current: '', rate_bps: 0, eta_s: null },
    paths: [],
    created_ms: 0,
  };
}

const empty: WorkInput = { instances: [], gateway: [], downloads: [], libraryCount: 0, profileCount: 0 };

describe('lastReplyText', () => {
  it('formats the decode speed of the last reply', () => {
    expect(lastReplyText({ at_ms: 1, decode_tps: 45.234, completion_tokens: 12 })).toBe('45.2 tok/s');
    expect(lastReplyText({ at_ms: 1, decode_tps: 312.7, completion_tokens: null })).toBe('313 tok/s');
    expect(lastReplyText({ at_ms: 1, decode_tps: 0.42, completion_tokens: null })).toBe('0.42 tok/s');
  });

  it('says nothing before a reply, or for a speed that is none', () => {
    expect(lastReplyText(null)).toBeNull();
    expect(lastReplyText(undefined)).toBeNull();
    expect(lastReplyText({ at_ms: 1, decode_tps: 0, completion_tokens: 0 })).toBeNull();
    expect(lastReplyText({ at_ms: 1, decode_tps: Number.NaN, completion_tokens: 0 })).toBeNull();
  });
});

describe('rigWork', () => {
  it('shows the running models with their gateway names, state, memory and last reply', () => {
    const work = rigWork({
      ...empty,
      instances: [
        instance('qwen', 'ready', {
          planned_memory: [{ gpu: 1, bytes: 2 * GIB }, { gpu: 0, bytes: 3 * GIB }],
          measured_memory: [{ gpu: 0, pid: 1, bytes: 3.2 * GIB }],
        }),
        instance('big', 'loading', { progress: 0.4 }),
        instance('old', 'stopped'),
        instance('bad', 'crashed'),
      ],
      gateway: [
        gatewayModel('qwen', { aliases: ['gpt-4o'], last_reply: { at_ms: 5, decode_tps: 51.26, completion_tokens: 30 } }),
        gatewayModel('big', { state: 'loading' }),
      ],
    });
    expect(work.models.map((m) => [m.name, m.stateText, m.tone])).toEqual([
      ['bad', 'crashed', 'bad'],
      ['big', 'loading 40%', 'info'],
      ['qwen', 'ready', 'ok'],
    ]);
    const qwen = work.models[2]!;
    expect(qwen.aliases).toEqual(['gpt-4o']);
    expect(qwen.lastReply).toBe('51.3 tok/s');
    expect(qwen.chattable).toBe(true);
    expect(qwen.memory.map((r) => [r.gpu, r.planned, r.measured])).toEqual([
      [0, 3 * GIB, 3.2 * GIB],
      [1, 2 * GIB, null],
    ]);
    const big = work.models[1]!;
    expect(big.progress).toBe(0.4);
    expect(big.lastReply).toBeNull();
    expect(big.chattable).toBe(false);
    expect(work.next).toBeNull();
  });

  it('shows a model before the gateway answered, without aliases or speed', () => {
    const work = rigWork({ ...empty, gateway: null, instances: [instance('qwen', 'ready')] });
    expect(work.models[0]).toMatchObject({ name: 'qwen', aliases: [], lastReply: null });
  });

  it('lists the downloads under way with their progress, not the finished or failed ones', () => {
    const work = rigWork({
      ...empty,
      downloads: [download(3, 'running', 42, 100), download(2, 'queued', 0, 0), download(1, 'done', 100, 100), download(4, 'failed', 1, 100)],
    });
    expect(work.downloads.map((d) => [d.id, d.stateText, d.pct])).toEqual([
      [3, 'downloading 42 %', 42],
      [2, 'queued', null],
    ]);
    expect(work.downloads[0]!.title).toBe('org/model-GGUF · Q4_K_M');
    expect(work.next).toBeNull();
  });

  it('on an empty rig offers to find a model that fits', () => {
    expect(rigWork(empty).next).toEqual({ kind: 'find', text: 'Find a model that fits this rig', href: '#/welcome' });
  });

  it('with models but none running offers to run one from the Models page', () => {
    const next = rigWork({ ...empty, libraryCount: 2, instances: [instance('old', 'stopped')] }).next;
    expect(next).toMatchObject({ kind: 'run', href: '#/models' });
    expect(rigWork({ ...empty, profileCount: 1 }).next?.kind).toBe('run');
  });
});

describe('nextStep', () => {
  it('gives no advice until the library and the profiles are known', () => {
    expect(nextStep(null, 0)).toBeNull();
    expect(nextStep(0, null)).toBeNull();
  });
});
