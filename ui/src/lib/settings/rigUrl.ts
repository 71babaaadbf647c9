// "Connect to another rig": the other daemon's /login?token= sets its own session cookie and
// redirects to its UI, so the browser simply navigates there. Only http(s) URLs are accepted.

export type RigLoginUrl = { ok: true; url: string } | { ok: false; error: string };

export function rigLoginUrl(rawUrl: string, rawToken: string): RigLoginUrl {
  const input = rawUrl.trim();
  const token = rawToken.trim();
  if (!input) return { ok: false, error: 'Enter the rig’s address, e.g. http://192.168.1.20:7878' };
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    return { ok: false, error: `“${input}” is not a URL; it should look like http://192.168.1.20:7878` };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return { ok: false, error: `Only http:// and https:// addresses work here, not ${url.protocol}//` };
  }
  if (!token) return { ok: false, error: 'Enter the token printed by `rigdeck serve` on that rig.' };
  const base = (url.origin + url.pathname).replace(/\/+$/, '');
  return { ok: true, url: `${base}/login?token=${encodeURIComponent(token)}` };
}
