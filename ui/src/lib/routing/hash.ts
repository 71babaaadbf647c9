// Hash routes (#/, #/history, #/models, #/plan?model=…, #/instances, #/settings): the daemon serves one
// index.html, so routing stays on the client and a reload keeps the page.

export type Route = 'dashboard' | 'history' | 'models' | 'plan' | 'instances' | 'settings';

/** The navigation items; `plan` is reached from a model and shows under Models. */
export const ROUTES: { route: Route; hash: string; label: string }[] = [
  { route: 'dashboard', hash: '#/', label: 'Dashboard' },
  { route: 'history', hash: '#/history', label: 'History' },
  { route: 'models', hash: '#/models', label: 'Models' },
  { route: 'instances', hash: '#/instances', label: 'Engines' },
  { route: 'settings', hash: '#/settings', label: 'Settings' },
];

export function parseHash(hash: string): Route {
  const path = hash.replace(/^#/, '').replace(/[?].*$/, '').replace(/\/+$/, '');
  switch (path) {
    case '/history':
      return 'history';
    case '/models':
      return 'models';
    case '/plan':
      return 'plan';
    case '/instances':
      return 'instances';
    case '/settings':
      return 'settings';
    default:
      return 'dashboard';
  }
}

/** The nav item to highlight for a route. */
export function navRoute(route: Route): Route {
  return route === 'plan' ? 'models' : route;
}

/** The query part of a hash route: `#/plan?model=%2Fm%2Fx.gguf&rig=4x3090`. */
export function hashParams(hash: string): URLSearchParams {
  const q = hash.indexOf('?');
  return new URLSearchParams(q >= 0 ? hash.slice(q + 1) : '');
}

/** The placement editor's address for a model (and optionally a rig). */
export function planHash(model: string, rig?: string | null): string {
  const p = new URLSearchParams({ model });
  if (rig && rig !== 'live') p.set('rig', rig);
  return `#/plan?${p.toString()}`;
}
