// Fetch client: request shape, error bodies shown verbatim, 401 detection.

import { afterEach, describe, expect, it, vi } from 'vitest';
import { api, ApiError, engineVersionsQuery, errorFromBody, hubSearchQuery, probeSession } from './client';

afterEach(() => {
  vi.unstubAllGlobals();
});

function respond(status: number, body: string, statusText = '') {
  const fetchMock = vi.fn(async (_input: string, _init?: RequestInit) => new Response(status === 204 ? null : body, { status, statusText }));
  vi.stubGlobal('fetch', fetchMock);
  return fetchMock;
}

describe('errorFromBody', () => {
  it('keeps the daemon message verbatim', () => {
    const e = errorFromBody(400, 'Bad Request', '{"code":"invalid_settings","message":"telemetry_period_ms must be 250–60000"}');
    expect(e.code).toBe('invalid_settings');
    expect(e.message).toBe('telemetry_period_ms must be 250–60000');
    expect(e.status).toBe(400);
  });
  it('falls back to the status line for a non-JSON body', () => {
    expect(errorFromBody(502, 'Bad Gateway', '<html>' + 'x'.repeat(400)).message).toBe('HTTP 502 Bad Gateway');
  });
});

describe('api', () => {
  it('sends the session cookie and parses JSON', async () => {
    const f = respond(200, '{"version":"0.1.0"}');
    await expect(api.status()).resolves.toEqual({ version: '0.1.0' });
    const [path, init] = f.mock.calls[0] as [string, RequestInit];
    expect(path).toBe('/api/v1/status');
    expect(init.credentials).toBe('include');
  });

  it('posts the token as JSON and accepts 204', async () => {
    const f = respond(204, '');
    await expect(api.signIn('tok')).resolves.toBeUndefined();
    const [path, init] = f.mock.calls[0] as [string, RequestInit];
    expect(path).toBe('/api/v1/session');
    expect(init.method).toBe('POST');
    expect(JSON.parse(init.body as string)).toEqual({ token: 'tok' });
  });

  it('sends a partial settings body with PUT', async () => {
    const f = respond(200, '{"telemetry_period_ms":500,"model_folders":[],"keep_running_in_background":false}');
    const s = await api.updateSettings({ telemetry_period_ms: 500 });
    expect(s.telemetry_period_ms).toBe(500);
    const [, init] = f.mock.calls[0] as [string, RequestInit];
    expect(init.method).toBe('PUT');
    expect(init.body).toBe('{"telemetry_period_ms":500}');
  });

  it('throws ApiError with the 401 flag', async () => {
    respond(401, '{"code":"unauthorized","message":"sign in"}');
    const err = await api.status().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).unauthorized).toBe(true);
  });

  it('asks for the history range in the query', async () => {
    const f = respond(200, '{}');
    await api.history('24h');
    expect(f.mock.calls[0]![0]).toBe('/api/v1/telemetry/history?range=24h');
  });

  it('addresses hub models by owner and name, each escaped, with the revision', async () => {
    const f = respond(200, '{}');
    await api.hubModel('unsloth/Qwen3-8B-GGUF');
    await api.hubCard('org/a b', 'refs/pr/1');
    expect(f.mock.calls.map((c) => c[0])).toEqual([
      '/api/v1/hub/models/unsloth/Qwen3-8B-GGUF',
      '/api/v1/hub/models/org/a%20b/card?revision=refs%2Fpr%2F1',
    ]);
  });

  it('searches with the text trimmed and only the filters set', async () => {
    expect(hubSearchQuery({ text: ' qwen 3 ' })).toBe('text=qwen+3');
    expect(hubSearchQuery({ text: '', format: 'gguf', sort: 'likes', limit: 40 })).toBe('text=&format=gguf&sort=likes&limit=40');
    expect(hubSearchQuery({ text: 'x', format: null })).toBe('text=x');
  });

  it('posts download actions and the fit', async () => {
    const f = respond(200, '{}');
    await api.downloadAction(7, 'pause');
    await api.hubFit({ repo: 'org/m', rig: 'live', context: 8192 });
    await api.forgetDownload(7);
    expect(f.mock.calls.map((c) => [c[0], (c[1] as RequestInit).method])).toEqual([
      ['/api/v1/downloads/7/pause', 'POST'],
      ['/api/v1/hub/fit', 'POST'],
      ['/api/v1/downloads/7', 'DELETE'],
    ]);
    expect(JSON.parse((f.mock.calls[1]![1] as RequestInit).body as string)).toEqual({ repo: 'org/m', rig: 'live', context: 8192 });
  });

  it('lists, verifies and deletes cached models, one snapshot by its commit', async () => {
    const f = respond(200, '{}');
    await api.hubCache();
    await api.verifyCached('org/a b');
    await api.verifyCached('org/m', 'refs/pr/1');
    await api.removeCached('org/m');
    await api.removeCached('org/m', 'c'.repeat(40));
    expect(f.mock.calls.map((c) => [c[0], (c[1] as RequestInit).method])).toEqual([
      ['/api/v1/hub/cache', 'GET'],
      ['/api/v1/hub/cache/org/a%20b/verify', 'POST'],
      ['/api/v1/hub/cache/org/m/verify?revision=refs%2Fpr%2F1', 'POST'],
      ['/api/v1/hub/cache/org/m', 'DELETE'],
      [`/api/v1/hub/cache/org/m?commit=${'c'.repeat(40)}`, 'DELETE'],
    ]);
    expect((f.mock.calls[1]![1] as RequestInit).body).toBe('{}');
  });

  it('sends the download folder, "" for the Hugging Face cache', async () => {
    const f = respond(200, '{"telemetry_period_ms":1000,"model_folders":[],"keep_running_in_background":false,"download_folder":null}');
    const s = await api.updateSettings({ download_folder: '' });
    expect(s.download_folder).toBeNull();
    expect((f.mock.calls[0]![1] as RequestInit).body).toBe('{"download_folder":""}');
  });
});

describe('engine installs', () => {
  it('ask for the releases of a kind, on the given index only when one is given', async () => {
    expect(engineVersionsQuery('vllm')).toBe('kind=vllm');
    expect(engineVersionsQuery('sglang', '  ')).toBe('kind=sglang');
    const f = respond(200, '{"kind":"vllm","versions":["0.33.0"],"default":"0.33.0"}');
    await expect(api.engineVersions('vllm', ' https://mirror.example/simple?x=1&y ')).resolves.toMatchObject({ default: '0.33.0' });
    expect(f.mock.calls[0]![0]).toBe('/api/v1/engines/versions?kind=vllm&index_url=https%3A%2F%2Fmirror.example%2Fsimple%3Fx%3D1%26y');
    expect((f.mock.calls[0]![1] as RequestInit).method).toBe('GET');
  });

  it("carry an unreachable index's problem", async () => {
    respond(502, '{"code":"index_unreachable","message":"cannot reach https://pypi.org/simple/vllm/"}');
    const err = await api.engineVersions('vllm').catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 502, code: 'index_unreachable', message: 'cannot reach https://pypi.org/simple/vllm/' });
  });

  it('post the install body as given', async () => {
    const f = respond(202, '{"started":true}');
    await api.installEngine({ kind: 'sglang', version: '0.5.23', index_url: 'https://mirror/simple' });
    await api.installEngine({ kind: 'vllm' });
    expect(f.mock.calls.map((c) => [c[0], (c[1] as RequestInit).method, (c[1] as RequestInit).body])).toEqual([
      ['/api/v1/engines/install', 'POST', '{"kind":"sglang","version":"0.5.23","index_url":"https://mirror/simple"}'],
      ['/api/v1/engines/install', 'POST', '{"kind":"vllm"}'],
    ]);
  });
});

describe('gateway calls', () => {
  it('read the gateway and its usage window, in whole milliseconds', async () => {
    const f = respond(200, '{}');
    await api.gateway();
    await api.gatewayUsage(1000.7, 2000.2);
    expect(f.mock.calls.map((c) => [c[0], (c[1] as RequestInit).method])).toEqual([
      ['/api/v1/gateway', 'GET'],
      ['/api/v1/gateway/usage?from_ms=1000&to_ms=2000', 'GET'],
    ]);
  });

  it('list, create and revoke keys', async () => {
    const f = respond(201, '{"key":{"id":3,"name":"laptop"},"secret":"rdk-x"}');
    await expect(api.createKey('laptop')).resolves.toMatchObject({ secret: 'rdk-x' });
    await api.keys();
    await api.revokeKey(3);
    expect(f.mock.calls.map((c) => [c[0], (c[1] as RequestInit).method])).toEqual([
      ['/api/v1/keys', 'POST'],
      ['/api/v1/keys', 'GET'],
      ['/api/v1/keys/3', 'DELETE'],
    ]);
    expect(JSON.parse((f.mock.calls[0]![1] as RequestInit).body as string)).toEqual({ name: 'laptop' });
  });

  it("carries a refused name's problem", async () => {
    respond(400, '{"code":"invalid_key_name","message":"the name is empty"}');
    const err = await api.createKey('').catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 400, code: 'invalid_key_name', message: 'the name is empty' });
  });
});

describe('probeSession', () => {
  it('tells ok, unauthorized and unreachable apart', async () => {
    respond(200, '{}');
    await expect(probeSession()).resolves.toBe('ok');
    respond(401, '{"code":"unauthorized","message":"x"}');
    await expect(probeSession()).resolves.toBe('unauthorized');
    vi.stubGlobal('fetch', vi.fn(async () => Promise.reject(new TypeError('Failed to fetch'))));
    await expect(probeSession()).resolves.toBe('unreachable');
    respond(500, '{"code":"internal","message":"x"}');
    await expect(probeSession()).resolves.toBe('unreachable');
  });
});
