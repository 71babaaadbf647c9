// Hash routes (#/welcome, #/, #/history, #/models, #/hub, #/hub/org/name, #/plan?model=…, #/instances,
// #/gateway, #/gateway/usage, #/chat, #/chat/<conversation id>, #/bench, #/bench/<run id>,
// #/bench/tune, #/bench/tune/<tuning id>, #/fleet, #/settings):
// the daemon serves one index.html, so routing stays on the client and a reload keeps the page.

export type Route =
  | 'welcome'
  | 'dashboard'
  | 'history'
  | 'models'
  | 'hub'
  | 'hub-model'
  | 'plan'
  | 'instances'
  | 'gateway'
  | 'usage'
  | 'chat'
  | 'bench'
  | 'fleet'
  | 'settings';

/** The navigation items; `plan` and the hub are reached from Models and show under it, the
 *  gateway's usage under Gateway. */
export const ROUTES: { route: Route; hash: string; label: string }[] = [
  { route: 'welcome', hash: '#/welcome', label: 'Start' },
  { route: 'dashboard', hash: '#/', label: 'Dashboard' },
  { route: 'history', hash: '#/history', label: 'History' },
  { route: 'models', hash: '#/models', label: 'Models' },
  { route: 'instances', hash: '#/instances', label: 'Engines' },
  { route: 'gateway', hash: '#/gateway', label: 'Gateway' },
  { route: 'chat', hash: '#/chat', label: 'Chat' },
  { route: 'bench', hash: '#/bench', label: 'Benchmarks' },
  { route: 'fleet', hash: '#/fleet', label: 'Fleet' },
  { route: 'settings', hash: '#/settings', label: 'Settings' },
];

/** A tab of a page in two halves (components/common/PageTabs): where it leads, its text, its test
 *  id. Its key is a route, or a half of one page (the Benchmarks page's runs and tunings). */
export interface PageTab<R extends string = Route> {
  route: R;
  hash: string;
  label: string;
  testid: string;
}

/** Models: the library on disk, and the hub to find more. */
export const MODELS_TABS: PageTab[] = [
  { route: 'models', hash: '#/models', label: 'Library', testid: 'tab-library' },
  { route: 'hub', hash: '#/hub', label: 'Find models', testid: 'tab-hub' },
];

/** Gateway: the endpoint, its models and keys; and its usage. */
export const GATEWAY_TABS: PageTab[] = [
  { route: 'gateway', hash: '#/gateway', label: 'Endpoint & keys', testid: 'tab-gateway' },
  { route: 'usage', hash: '#/gateway/usage', label: 'Usage', testid: 'tab-usage' },
];

/** The address' path: no `#`, no query, no trailing slash. */
function hashPath(hash: string): string {
  return hash.replace(/^#/, '').replace(/[?].*$/, '').replace(/\/+$/, '');
}

export function parseHash(hash: string): Route {
  const path = hashPath(hash);
  if (path.startsWith('/hub/')) return hubRepo(hash) ? 'hub-model' : 'hub';
  if (path === '/chat' || path.startsWith('/chat/')) return 'chat';
  if (path === '/bench' || path.startsWith('/bench/')) return 'bench';
  switch (path) {
    case '/welcome':
      return 'welcome';
    case '/hub':
      return 'hub';
    case '/history':
      return 'history';
    case '/models':
      return 'models';
    case '/plan':
      return 'plan';
    case '/instances':
      return 'instances';
    case '/gateway':
      return 'gateway';
    case '/gateway/usage':
      return 'usage';
    case '/settings':
      return 'settings';
    case '/fleet':
      return 'fleet';
    default:
      return 'dashboard';
  }
}

/** The nav item to highlight for a route. */
export function navRoute(route: Route): Route {
  if (route === 'usage') return 'gateway';
  return route === 'plan' || route === 'hub' || route === 'hub-model' ? 'models' : route;
}

/** The query part of a hash route: `#/plan?model=%2Fm%2Fx.gguf&rig=4x3090`. */
/** Benchmarks: the runs, the tunings of a profile's knobs, and quality against a reference (one
 *  page, three parts). */
export type BenchHalf = 'runs' | 'tune' | 'quality';
export const BENCH_TABS: PageTab<BenchHalf>[] = [
  { route: 'runs', hash: '#/bench', label: 'Runs', testid: 'bench-tab-runs' },
  { route: 'tune', hash: '#/bench/tune', label: 'Tuning', testid: 'bench-tab-tune' },
  { route: 'quality', hash: '#/bench/quality', label: 'Quality', testid: 'bench-tab-quality' },
];

export function hashParams(hash: string): URLSearchParams {
  const q = hash.indexOf('?');
  return new URLSearchParams(q >= 0 ? hash.slice(q + 1) : '');
}

/** How the placement editor opens a model: as llama-server would place it, or (from a fit
 *  verdict) with the automatic placement at the context the verdict was planned at. */
export interface PlanOpening {
  auto: boolean;
  context: number | null;
}

/** The placement editor's address for a model (and optionally a rig, and how it opens). */
export function planHash(model: string, rig?: string | null, opening?: Partial<PlanOpening>): string {
  const p = new URLSearchParams({ model });
  if (rig && rig !== 'live') p.set('rig', rig);
  if (opening?.auto) p.set('auto', '1');
  if (opening?.context) p.set('context', String(opening.context));
  return `#/plan?${p.toString()}`;
}

/** How a placement editor's address asks it to open (see planHash). */
export function planOpening(params: URLSearchParams): PlanOpening {
  const context = Number(params.get('context'));
  return { auto: params.get('auto') === '1', context: Number.isInteger(context) && context > 0 ? context : null };
}

/** A hub model page's address: `#/hub/org/name`, each part escaped; `quant` marks the
 *  quantization a link suggested (the starter list's). */
export function hubModelHash(repo: string, quant?: string | null): string {
  const path = repo.split('/').map(encodeURIComponent).join('/');
  return quant ? `#/hub/${path}?${new URLSearchParams({ quant }).toString()}` : `#/hub/${path}`;
}

/** The `org/name` of a hub model page's address, or null when it names none. */
export function hubRepo(hash: string): string | null {
  const path = hashPath(hash);
  const m = /^\/hub\/([^/]+)\/([^/]+)$/.exec(path);
  if (!m) return null;
  try {
    return `${decodeURIComponent(m[1]!)}/${decodeURIComponent(m[2]!)}`;
  } catch {
    // A hand-typed address with a stray `%`.
    return null;
  }
}

/** A conversation's address: `#/chat/12`; null is a new chat (`#/chat`). */
export function chatHash(id: number | null): string {
  return id == null ? '#/chat' : `#/chat/${id}`;
}

/** The conversation a chat address names, or null (a new chat, or an id that is not one). */
export function chatConversationId(hash: string): number | null {
  const path = hashPath(hash);
  const m = /^\/chat\/(\d{1,15})$/.exec(path);
  return m ? Number(m[1]) : null;
}

/** A benchmark run's address: `#/bench/12`; null is the page with no run open (`#/bench`). */
export function benchHash(id: number | null): string {
  return id == null ? '#/bench' : `#/bench/${id}`;
}

/** The run a benchmarks address names, or null (none open, or an id that is not one). */
export function benchRunId(hash: string): number | null {
  const path = hashPath(hash);
  const m = /^\/bench\/(\d{1,15})$/.exec(path);
  return m ? Number(m[1]) : null;
}

/** The Tuning half of the Benchmarks page: `#/bench/tune`, or a tuning open: `#/bench/tune/3`. */
export function tuneHash(id: number | null): string {
  return id == null ? '#/bench/tune' : `#/bench/tune/${id}`;
}

/** The Quality part of the Benchmarks page: references, KLD measurements and frontiers. */
export const QUALITY_HASH = '#/bench/quality';

/** The half of the Benchmarks page an address shows. */
export function benchHalf(hash: string): BenchHalf {
  const path = hashPath(hash);
  if (path === '/bench/quality') return 'quality';
  return path === '/bench/tune' || path.startsWith('/bench/tune/') ? 'tune' : 'runs';
}

/** The tuning a benchmarks address names, or null (none open, or an id that is not one). */
export function benchTuneId(hash: string): number | null {
  const path = hashPath(hash);
  const m = /^\/bench\/tune\/(\d{1,15})$/.exec(path);
  return m ? Number(m[1]) : null;
}
