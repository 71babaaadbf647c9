// Fetch client for the daemon's JSON API. Same origin, cookie credentials (the session cookie set by
// /login or POST /api/v1/session). Every failure becomes an ApiError that carries the server's own
// `{code, message}` so the UI can show the message verbatim.

import type {
  ApiErrorBody,
  ModelRun,
  RunSource,
  SpeculationView,
  ApiKeyView,
  ChatMessage,
  ChatModel,
  ChatTemplates,
  Conversation,
  ConversationDetail,
  ConversationPatch,
  ConversationSummary,
  CreatedApiKey,
  NewChatMessage,
  NewConversation,
  GatewayUsage,
  GatewayView,
  BuildBackend,
  Calibration,
  CacheRemoved,
  CacheVerification,
  DownloadAction,
  DownloadView,
  DryRunRequest,
  DryRunResponse,
  EngineBuild,
  EngineInstall,
  EngineVersions,
  FitRequest,
  FitResponse,
  HubCacheListing,
  HubCard,
  HubModelPage,
  HubModelSummary,
  HubSearchQuery,
  HubTokenStatus,
  NewDownload,
  RecommendedModels,
  GangModelSurvey,
  GangStatus,
  InstanceView,
  LaunchProfile,
  LogLine,
  SavedProfile,
  History,
  HistoryRange,
  ModelEntry,
  KnownFolder,
  AddedFolder,
  NewProfile,
  ParseRequest,
  EngineKind,
  SourceEngineKind,
  PlanRequest,
  PlanResponse,
  RigPreset,
  LinkOption,
  ServerStatus,
  Settings,
  MemoryBandwidthStatus,
} from './types';

import { relayedPath, viewedRig } from '../fleet/viewing';

export class ApiError extends Error {
  /** HTTP status, or 0 when the daemon could not be reached at all. */
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }

  get unauthorized(): boolean {
    return this.status === 401;
  }
}

/** Reads an error body; a body that is not `{code, message}` still yields a useful message. */
export function errorFromBody(status: number, statusText: string, bodyText: string): ApiError {
  try {
    const body = JSON.parse(bodyText) as Partial<ApiErrorBody>;
    if (body && typeof body.message === 'string') {
      return new ApiError(status, typeof body.code === 'string' ? body.code : 'http_' + status, body.message);
    }
  } catch {
    // Not JSON (a proxy's HTML page, say): fall through to the status line.
  }
  const text = bodyText.trim();
  const message = text && text.length < 300 ? text : `HTTP ${status} ${statusText}`.trim();
  return new ApiError(status, 'http_' + status, message);
}

/** True for the rejection of a request cancelled through its AbortSignal (a newer one replaced it). */
export function isAbort(e: unknown): boolean {
  return e instanceof DOMException ? e.name === 'AbortError' : (e as { name?: string } | null)?.name === 'AbortError';
}

/** One call to the daemon: JSON in and out (plain text with `text`); a failure is an ApiError.
 *  Exported for the per-concern clients (lib/bench/client). */
export async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal, text = false): Promise<T> {
  const init: RequestInit = {
    method,
    credentials: 'include',
    headers: { Accept: text ? 'text/plain' : 'application/json' },
  };
  if (signal) init.signal = signal;
  if (body !== undefined) {
    init.headers = { ...init.headers, 'Content-Type': 'application/json' };
    init.body = JSON.stringify(body);
  }
  let res: Response;
  try {
    res = await fetch(relayedPath(path, viewedRig), init);
  } catch (e) {
    if (isAbort(e)) throw e;
    throw new ApiError(0, 'unreachable', `Cannot reach the Rigdeck daemon (${(e as Error).message}).`);
  }
  if (!res.ok) {
    throw errorFromBody(res.status, res.statusText, await res.text().catch(() => ''));
  }
  if (res.status === 204) return undefined as T;
  if (text) return (await res.text()) as T;
  return (await res.json()) as T;
}

/** `org/name` as two path segments, each escaped (names may hold dots, dashes, underscores). */
function repoPath(repo: string): string {
  return repo.split('/').map(encodeURIComponent).join('/');
}

function revisionQuery(revision?: string | null): string {
  return revision ? `?revision=${encodeURIComponent(revision)}` : '';
}

/** The search's query string; empty text lists the most popular models. */
export function hubSearchQuery(q: HubSearchQuery): string {
  const p = new URLSearchParams({ text: q.text.trim() });
  if (q.format) p.set('format', q.format);
  if (q.sort) p.set('sort', q.sort);
  if (q.limit != null) p.set('limit', String(q.limit));
  return p.toString();
}

/** The versions query: the kind, and the index only when one is given. */
export function engineVersionsQuery(kind: EngineKind, indexUrl?: string | null): string {
  const p = new URLSearchParams({ kind });
  const index = indexUrl?.trim();
  if (index) p.set('index_url', index);
  return p.toString();
}

export const api = {
  status: () => request<ServerStatus>('GET', '/api/v1/status'),
  signIn: (token: string) => request<void>('POST', '/api/v1/session', { token }),
  signOut: () => request<void>('DELETE', '/api/v1/session'),
  history: (range: HistoryRange) =>
    request<History>('GET', `/api/v1/telemetry/history?range=${encodeURIComponent(range)}`),
  settings: () => request<Settings>('GET', '/api/v1/settings'),
  /** The body is a partial Settings; the answer is the full new Settings. */
  updateSettings: (patch: Partial<Settings>) => request<Settings>('PUT', '/api/v1/settings', patch),
  memoryBandwidth: () => request<MemoryBandwidthStatus>('GET', '/api/v1/host/memory-bandwidth'),
  /** Measures now (a few seconds); answers with the new status. */
  measureMemoryBandwidth: () => request<MemoryBandwidthStatus>('POST', '/api/v1/host/memory-bandwidth'),
  models: () => request<ModelEntry[]>('GET', '/api/v1/models'),
  /** Rescans the model folders now; answers the new list. */
  rescanModels: () => request<ModelEntry[]>('POST', '/api/v1/models/rescan'),
  /** The folders other tools (Hugging Face, LM Studio, llama.cpp, Ollama, Jan) keep models in. */
  foundFolders: () => request<KnownFolder[]>('GET', '/api/v1/models/found-folders'),
  /** Adds a folder (absolute, or `~/…`) to the library's model folders and rescans. */
  addModelFolder: (path: string) => request<AddedFolder>('POST', '/api/v1/models/folders', { path }),
  rigs: () => request<RigPreset[]>('GET', '/api/v1/rigs'),
  rigLinks: () => request<LinkOption[]>('GET', '/api/v1/rigs/links'),
  plan: (body: PlanRequest, signal?: AbortSignal) => request<PlanResponse>('POST', '/api/v1/plan', body, signal),
  /** Reads a pasted llama-server command line into a drawn plan (`parsed` set). */
  parsePlan: (body: ParseRequest, signal?: AbortSignal) =>
    request<PlanResponse>('POST', '/api/v1/plan/parse', body, signal),
  /** llama.cpp's own figures for a plan (`llama-fit-params` of a registered build): seconds, so
   *  never awaited before the plan is shown. `error` set says why there are none. */
  dryRun: (body: DryRunRequest, signal?: AbortSignal) =>
    request<DryRunResponse>('POST', '/api/v1/plan/dry-run', body, signal),
  /** This rig's records per (architecture, backend, device model), newest check first. */
  planCalibrations: () => request<Calibration[]>('GET', '/api/v1/plan/calibration'),
  engines: () => request<EngineBuild[]>('GET', '/api/v1/engines'),
  /** Starts building llama.cpp (or ik_llama.cpp) from its pinned source; progress comes as
   *  `engine.build` events. A CUDA build is for the GPUs the daemon sees. */
  buildEngine: (backend: BuildBackend = 'cpu', kind: SourceEngineKind = 'llama.cpp', release?: string) =>
    request<{ started: boolean }>('POST', '/api/v1/engines/build', { backend, kind, ...(release ? { release } : {}) }),
  /** The releases of an engine the package index serves (`indexUrl`, else pip's own, else PyPI),
   *  newest first, against the installed builds (for llama.cpp and ik_llama.cpp: the packages
   *  their sources come in); `502 index_unreachable` when it cannot be read. */
  engineVersions: (kind: EngineKind, indexUrl?: string | null, signal?: AbortSignal) =>
    request<EngineVersions>('GET', `/api/v1/engines/versions?${engineVersionsQuery(kind, indexUrl)}`, undefined, signal),
  /** Installs vLLM or SGLang (the given version, else the newest on the index) into a managed
   *  environment; pip's output comes as `engine.build` events. */
  installEngine: (body: EngineInstall) => request<{ started: boolean }>('POST', '/api/v1/engines/install', body),
  profiles: () => request<LaunchProfile[]>('GET', '/api/v1/profiles'),
  profile: (name: string) => request<SavedProfile>('GET', `/api/v1/profiles/${encodeURIComponent(name)}`),
  createProfile: (profile: LaunchProfile | NewProfile, auto = false) =>
    request<SavedProfile>('POST', `/api/v1/profiles${auto ? '?auto=true' : ''}`, profile),
  updateProfile: (name: string, profile: LaunchProfile, auto = false) =>
    request<SavedProfile>('PUT', `/api/v1/profiles/${encodeURIComponent(name)}${auto ? '?auto=true' : ''}`, profile),
  deleteProfile: (name: string) => request<void>('DELETE', `/api/v1/profiles/${encodeURIComponent(name)}`),
  /** A shell script or a systemd unit, as text. */
  exportProfile: (name: string, format: 'shell' | 'systemd') =>
    request<string>('GET', `/api/v1/profiles/${encodeURIComponent(name)}/export?format=${format}`, undefined, undefined, true),
  startProfile: (name: string, force = false) =>
    request<InstanceView>('POST', `/api/v1/profiles/${encodeURIComponent(name)}/start`, { force }),
  instances: () => request<InstanceView[]>('GET', '/api/v1/instances'),
  /** A gang this daemon heads (404 for an instance that is not one). */
  gang: (name: string) => request<GangStatus>('GET', `/api/v1/gangs/${encodeURIComponent(name)}`),
  /** Which followers of a multi-node profile lack its model, and where a download lands there. */
  gangModelSurvey: (name: string) =>
    request<GangModelSurvey>('GET', `/api/v1/gangs/${encodeURIComponent(name)}/fetch-model`),
  /** Starts the head's download of the model on each follower's rig that lacks it. */
  fetchGangModel: (name: string) =>
    request<GangModelSurvey>('POST', `/api/v1/gangs/${encodeURIComponent(name)}/fetch-model`),
  instanceSpeculation: (name: string) =>
    request<SpeculationView>('GET', `/api/v1/instances/${encodeURIComponent(name)}/speculation`),
  stopInstance: (name: string) => request<InstanceView>('POST', `/api/v1/instances/${encodeURIComponent(name)}/stop`),
  restartInstance: (name: string, force = false) =>
    request<InstanceView>('POST', `/api/v1/instances/${encodeURIComponent(name)}/restart`, { force }),
  instanceLogs: (name: string, q: { search?: string; tail?: number; after?: number } = {}) => {
    const p = new URLSearchParams();
    if (q.search) p.set('search', q.search);
    if (q.tail != null) p.set('tail', String(q.tail));
    if (q.after != null) p.set('after', String(q.after));
    const qs = p.toString();
    return request<LogLine[]>('GET', `/api/v1/instances/${encodeURIComponent(name)}/logs${qs ? '?' + qs : ''}`);
  },
  // The model hub (Hugging Face, or HF_ENDPOINT) through the daemon, and its download queue.
  /** The starter catalog planned on the live rig and ranked (the hub read for each candidate). */
  hubRecommended: (context?: number, signal?: AbortSignal) =>
    request<RecommendedModels>('GET', `/api/v1/hub/recommended${context ? `?context=${context}` : ''}`, undefined, signal),
  hubSearch: (q: HubSearchQuery, signal?: AbortSignal) =>
    request<HubModelSummary[]>('GET', `/api/v1/hub/search?${hubSearchQuery(q)}`, undefined, signal),
  hubModel: (repo: string, revision?: string | null) =>
    request<HubModelPage>('GET', `/api/v1/hub/models/${repoPath(repo)}${revisionQuery(revision)}`),
  hubCard: (repo: string, revision?: string | null) =>
    request<HubCard>('GET', `/api/v1/hub/models/${repoPath(repo)}/card${revisionQuery(revision)}`),
  /** Plans every GGUF quantization on the rig from its headers (a few seconds on the real hub). */
  hubFit: (body: FitRequest, signal?: AbortSignal) => request<FitResponse>('POST', '/api/v1/hub/fit', body, signal),
  hubToken: () => request<HubTokenStatus>('GET', '/api/v1/hub/token'),
  setHubToken: (token: string) => request<HubTokenStatus>('PUT', '/api/v1/hub/token', { token }),
  deleteHubToken: () => request<HubTokenStatus>('DELETE', '/api/v1/hub/token'),
  /** The models in the shared Hugging Face cache, with their disk use. */
  hubCache: () => request<HubCacheListing>('GET', '/api/v1/hub/cache'),
  /** Deletes a model from the cache, or one snapshot of it with `commit`; 404 when it is not
   *  there. The library rescans by itself (`library.changed` follows). */
  removeCached: (repo: string, commit?: string | null) =>
    request<CacheRemoved>('DELETE', `/api/v1/hub/cache/${repoPath(repo)}${commit ? `?commit=${encodeURIComponent(commit)}` : ''}`),
  /** Re-hashes the model's local files against the hub (slow for a big model). */
  verifyCached: (repo: string, revision?: string | null) =>
    request<CacheVerification>('POST', `/api/v1/hub/cache/${repoPath(repo)}/verify${revisionQuery(revision)}`, {}),
  downloads: () => request<DownloadView[]>('GET', '/api/v1/downloads'),
  /** Queues a download (201); a 400 names the quantizations when the choice is ambiguous. */
  createDownload: (body: NewDownload) => request<DownloadView>('POST', '/api/v1/downloads', body),
  /** Runs a model in one request: download, automatic placement, a profile, a start (202). */
  startModelRun: (source: RunSource, context?: number | null) =>
    request<ModelRun>('POST', '/api/v1/model-runs', { source, context: context ?? null }),
  modelRuns: () => request<ModelRun[]>('GET', '/api/v1/model-runs'),
  /** 409 when the download's state does not allow it. */
  downloadAction: (id: number, action: DownloadAction) =>
    request<DownloadView>('POST', `/api/v1/downloads/${id}/${action}`),
  /** Forgets a finished, failed or cancelled download; its files stay. */
  forgetDownload: (id: number) => request<{ removed: number }>('DELETE', `/api/v1/downloads/${id}`),
  // The gateway (the OpenAI-compatible endpoint): its models, API keys and usage.
  gateway: (signal?: AbortSignal) => request<GatewayView>('GET', '/api/v1/gateway', undefined, signal),
  /** Requests, tokens and timings between two instants (epoch ms). */
  gatewayUsage: (fromMs: number, toMs: number, signal?: AbortSignal) =>
    request<GatewayUsage>('GET', `/api/v1/gateway/usage?from_ms=${Math.floor(fromMs)}&to_ms=${Math.floor(toMs)}`, undefined, signal),
  keys: () => request<ApiKeyView[]>('GET', '/api/v1/keys'),
  /** 201 with the secret, shown once; an empty or taken name is refused. */
  createKey: (name: string) => request<CreatedApiKey>('POST', '/api/v1/keys', { name }),
  /** Revokes (the key stays listed with `revoked_at_ms`). */
  revokeKey: (id: number) => request<ApiKeyView>('DELETE', `/api/v1/keys/${id}`),
  // Chat: conversations kept by the daemon, replies written by the gateway's models; the text of
  // a reply arrives as `chat.delta` events, its state changes as `chat.message`.
  chatModels: (signal?: AbortSignal) => request<ChatModel[]>('GET', '/api/v1/chat/models', undefined, signal),
  /** The chat templates a profile may name, and each architecture's own. */
  chatTemplates: () => request<ChatTemplates>('GET', '/api/v1/chat/templates'),
  /** Newest first; `q` searches titles and message text (each hit with a snippet). */
  conversations: (q = '', signal?: AbortSignal) =>
    request<ConversationSummary[]>('GET', `/api/v1/chat/conversations${q.trim() ? `?q=${encodeURIComponent(q.trim())}` : ''}`, undefined, signal),
  createConversation: (body: NewConversation) => request<Conversation>('POST', '/api/v1/chat/conversations', body),
  /** The conversation and every message of every branch. */
  conversation: (id: number, signal?: AbortSignal) =>
    request<ConversationDetail>('GET', `/api/v1/chat/conversations/${id}`, undefined, signal),
  updateConversation: (id: number, patch: ConversationPatch) =>
    request<Conversation>('PATCH', `/api/v1/chat/conversations/${id}`, patch),
  deleteConversation: (id: number) => request<void>('DELETE', `/api/v1/chat/conversations/${id}`),
  /** 202: the user's message and the reply, which the daemon goes on writing (streaming). */
  sendMessage: (conversationId: number, body: NewChatMessage) =>
    request<{ user: ChatMessage; assistant: ChatMessage }>('POST', `/api/v1/chat/conversations/${conversationId}/messages`, body),
  /** 202: a new reply beside this one (same parent). */
  regenerate: (messageId: number) => request<{ assistant: ChatMessage }>('POST', `/api/v1/chat/messages/${messageId}/regenerate`, {}),
  /** Ends a reply being written; its text so far is kept (status "stopped"). */
  stopMessage: (messageId: number) => request<ChatMessage>('POST', `/api/v1/chat/messages/${messageId}/stop`, {}),
  /** The conversation as a file (Markdown or JSON). */
  exportConversation: (id: number, format: 'markdown' | 'json') =>
    request<string>('GET', `/api/v1/chat/conversations/${id}/export?format=${format}`, undefined, undefined, true),
};

/** Used by the event socket after a close: is the session still good, gone, or the daemon down? */
export async function probeSession(): Promise<'ok' | 'unauthorized' | 'unreachable'> {
  try {
    await api.status();
    return 'ok';
  } catch (e) {
    if (e instanceof ApiError && e.unauthorized) return 'unauthorized';
    return 'unreachable';
  }
}
