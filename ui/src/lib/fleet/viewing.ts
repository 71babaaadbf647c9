// Which rig the UI shows: the desk's own API, or a paired rig's through the desk's relay
// (`/api/v1/fleet/peers/NAME/api/v1/…`). Chosen on the Fleet page, kept for the tab's life in
// sessionStorage, and applied by reloading the page so every store starts again on that rig.

/** The sessionStorage key of the rig being viewed. */
export const VIEWED_RIG_KEY = 'rigdeck.fleet.viewing';

/** Paths that always stay on the desk: its session, its status, its fleet. */
const DESK_ONLY = ['/api/v1/session', '/api/v1/status', '/api/v1/fleet'];

/** The path to fetch for `path` while `rig` is viewed (`null`: the desk's own). */
export function relayedPath(path: string, rig: string | null): string {
  if (!rig || !path.startsWith('/api/v1/')) return path;
  const bare = path.replace(/[?#].*$/, '');
  if (DESK_ONLY.some((p) => bare === p || bare.startsWith(p + '/'))) return path;
  return `/api/v1/fleet/peers/${encodeURIComponent(rig)}${path}`;
}

/** The rig a storage names, if its name is one a rig may have (1 to 63 letters, digits, . - _). */
export function storedRig(storage: Pick<Storage, 'getItem'> | null): string | null {
  const name = storage?.getItem(VIEWED_RIG_KEY) ?? null;
  return name && /^[A-Za-z0-9._-]{1,63}$/.test(name) ? name : null;
}

function sessionStore(): Storage | null {
  try {
    return typeof sessionStorage === 'undefined' ? null : sessionStorage;
  } catch {
    return null;
  }
}

/** The rig this tab views, read once: switching reloads the page. */
export const viewedRig: string | null = storedRig(sessionStore());

/** Views `rig` (`null`: back to the desk) on `hash`, reloading the page. */
export function viewRig(rig: string | null, hash: string): void {
  const store = sessionStore();
  if (rig) store?.setItem(VIEWED_RIG_KEY, rig);
  else store?.removeItem(VIEWED_RIG_KEY);
  window.location.hash = hash;
  window.location.reload();
}
