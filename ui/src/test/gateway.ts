// Gateway answers for the store and shaping tests: models, keys, usage reports.

import type { ApiKeyView, GatewayModel, GatewayUsage, GatewayView, RecentRequest } from '../lib/api/types';

export const T0 = 1_763_700_000_000;

export function model(name: string, extra: Partial<GatewayModel> = {}): GatewayModel {
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

export function gatewayView(models: GatewayModel[] = [model('qwen3-8b')], extra: Partial<GatewayView> = {}): GatewayView {
  return { base_url: 'http://127.0.0.1:7878/v1', models, evictions: [], ...extra };
}

export function key(id: number, name: string, extra: Partial<ApiKeyView> = {}): ApiKeyView {
  return {
    id,
    name,
    prefix: `rdk-${String(id).padStart(6, '0')}`,
    created_at_ms: T0 + id * 1000,
    last_used_at_ms: null,
    revoked_at_ms: null,
    ...extra,
  };
}

export function recent(at_ms: number, extra: Partial<RecentRequest> = {}): RecentRequest {
  return {
    at_ms,
    model: 'qwen3-8b',
    key_name: 'laptop',
    route: '/v1/chat/completions',
    stream: true,
    status: 'ok',
    http_status: 200,
    prompt_tokens: 100,
    completion_tokens: 50,
    ttft_ms: 120,
    decode_tps: 42.5,
    duration_ms: 1300,
    error: null,
    ...extra,
  };
}

export function usageReport(extra: Partial<GatewayUsage> = {}): GatewayUsage {
  return {
    totals: { requests: 3, errors: 1, prompt_tokens: 300, completion_tokens: 150 },
    by_model: [],
    by_key: [],
    series: { bucket_ms: 60_000, points: [] },
    recent: [],
    ...extra,
  };
}
