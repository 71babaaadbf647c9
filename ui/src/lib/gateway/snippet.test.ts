// Client snippets: environment variables and a curl request, shell-quoted.

import { describe, expect, it } from 'vitest';
import { curlSnippet, envSnippet, KEY_PLACEHOLDER, shellQuote } from './snippet';

describe('client snippets', () => {
  it('quote only what needs it', () => {
    expect(shellQuote('http://127.0.0.1:7878/v1')).toBe('http://127.0.0.1:7878/v1');
    expect(shellQuote('<key>')).toBe("'<key>'");
    expect(shellQuote("it's")).toBe("'it'\\''s'");
  });

  it('set the OpenAI variables, with a placeholder until a secret is shown', () => {
    expect(envSnippet('http://127.0.0.1:7878/v1')).toBe(
      `export OPENAI_BASE_URL=http://127.0.0.1:7878/v1\nexport OPENAI_API_KEY='${KEY_PLACEHOLDER}'`,
    );
    expect(envSnippet('http://127.0.0.1:7878/v1', 'rdk-abc123')).toContain('OPENAI_API_KEY=rdk-abc123');
  });

  it('post a chat completion to the model with curl', () => {
    const s = curlSnippet('http://127.0.0.1:7878/v1/', 'qwen3-8b', 'rdk-abc');
    expect(s.split('\n')[0]).toBe('curl http://127.0.0.1:7878/v1/chat/completions \\');
    expect(s).toContain("-H 'Authorization: Bearer rdk-abc'");
    const body = /-d '(.*)'$/.exec(s)![1]!;
    expect(JSON.parse(body)).toEqual({ model: 'qwen3-8b', messages: [{ role: 'user', content: 'Hello!' }] });
    expect(curlSnippet('http://h/v1', null)).toContain('"model":"<model>"');
    expect(curlSnippet('http://h/v1', null)).toContain(KEY_PLACEHOLDER);
  });
});
