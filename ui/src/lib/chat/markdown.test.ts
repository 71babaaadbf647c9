// Replies as HTML: escaped, code highlighted with a Copy button, images as links only.

import { describe, expect, it } from 'vitest';
import { highlightCode, renderChatMarkdown, unescapeHtml } from './markdown';

describe('chat markdown', () => {
  it('never passes the model’s HTML through', () => {
    const html = renderChatMarkdown('<img src=x onerror=alert(1)> <script>alert(1)</script> **hi**');
    expect(html).not.toMatch(/<img|<script/);
    expect(html).toContain('&lt;script&gt;');
    expect(html).toContain('<strong>hi</strong>');
  });
  it('highlights a known language inside a block with a Copy button', () => {
    const html = renderChatMarkdown('```python\ndef f(x):\n    return "<b>"\n```');
    expect(html).toContain('<div class="code-block"><div class="code-head"><span class="code-lang">python</span>');
    expect(html).toContain('data-copy-code');
    expect(html).toContain('<span class="hljs-keyword">def</span>');
    expect(html).toContain('&lt;b&gt;');
    expect(html).not.toContain('<b>');
  });
  it('shows an unknown language (or none) as plain escaped text', () => {
    expect(renderChatMarkdown('```\na < b && c\n```')).toContain('<pre><code class="hljs">a &lt; b &amp;&amp; c</code></pre>');
    expect(renderChatMarkdown('```brainfuck\n<>\n```')).toContain('<span class="code-lang">brainfuck</span>');
    expect(highlightCode('<x>', 'nope')).toBe('&lt;x&gt;');
  });
  it('highlights a block still being written (an unclosed fence)', () => {
    expect(renderChatMarkdown('Here:\n```js\nconst a = 1')).toContain('<span class="hljs-keyword">const</span>');
  });
  it('does not load images: they become links', () => {
    const html = renderChatMarkdown('![secret](https://evil.example/x.png?d=1)');
    expect(html).not.toContain('<img');
    expect(html).toContain('<a href="https://evil.example/x.png?d=1" target="_blank" rel="noopener noreferrer" class="image-link"');
  });
  it('keeps a leading rule block (no front matter in a reply)', () => {
    expect(renderChatMarkdown('---\ntitle: x\n---\nBody')).toContain('Body');
    expect(renderChatMarkdown('---\ntitle: x\n---\nBody')).toContain('title: x');
  });
  it('unescapes what the renderer escaped', () => {
    expect(unescapeHtml('&lt;a href=&quot;x&quot;&gt;&amp;&#39;')).toBe('<a href="x">&\'');
  });
});
