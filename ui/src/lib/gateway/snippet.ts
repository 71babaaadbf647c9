// The "use it from a client" snippets on the gateway page: environment variables for OpenAI
// clients and a curl request. A key is never known after its creation, so the snippets carry a
// placeholder unless the page still shows a secret just created.

export const KEY_PLACEHOLDER = '<your rdk-… key>';

/** Single quotes for a shell, with any single quote inside closed and escaped. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `export OPENAI_BASE_URL=… OPENAI_API_KEY=…` lines (openai-python, openai-node, most tools). */
export function envSnippet(baseUrl: string, secret?: string | null): string {
  return [`export OPENAI_BASE_URL=${shellQuote(baseUrl)}`, `export OPENAI_API_KEY=${shellQuote(secret || KEY_PLACEHOLDER)}`].join('\n');
}

/** A chat completion with curl against `model` (the first ready model, or a placeholder). */
export function curlSnippet(baseUrl: string, model?: string | null, secret?: string | null): string {
  const url = `${baseUrl.replace(/\/+$/, '')}/chat/completions`;
  const body = JSON.stringify({ model: model || '<model>', messages: [{ role: 'user', content: 'Hello!' }] });
  return [
    `curl ${shellQuote(url)} \\`,
    `  -H ${shellQuote(`Authorization: Bearer ${secret || KEY_PLACEHOLDER}`)} \\`,
    `  -H 'Content-Type: application/json' \\`,
    `  -d ${shellQuote(body)}`,
  ].join('\n');
}
