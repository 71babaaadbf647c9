// Hash routes (#/, #/history, #/settings): the daemon serves one index.html, so routing stays on
// the client and a reload keeps the page.

export type Route = 'dashboard' | 'history' | 'settings';

export const ROUTES: { route: Route; hash: string; label: string }[] = [
  { route: 'dashboard', hash: '#/', label: 'Dashboard' },
  { route: 'history', hash: '#/history', label: 'History' },
  { route: 'settings', hash: '#/settings', label: 'Settings' },
];

export function parseHash(hash: string): Route {
  const path = hash.replace(/^#/, '').replace(/[?].*$/, '').replace(/\/+$/, '');
  switch (path) {
    case '/history':
      return 'history';
    case '/settings':
      return 'settings';
    default:
      return 'dashboard';
  }
}
