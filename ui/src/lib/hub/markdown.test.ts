// Model cards as safe HTML: the Markdown a card uses, and hostile input that must come out inert.

import { describe, expect, it } from 'vitest';
import { escapeHtml, inline, MAX_CARD_CHARS, renderMarkdown, stripFrontMatter } from './markdown';

/** Every tag name the renderer produced: anything else would be markup from the input. */
function tags(html: string): string[] {
  return [...new Set([...html.matchAll(/<\/?([a-zA-Z0-9]+)/g)].map((m) => m[1]!.toLowerCase()))].sort();
}

const OURS = new Set(['a', 'blockquote', 'br', 'code', 'del', 'em', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'hr', 'img', 'li', 'ol', 'p', 'pre', 'strong', 'table', 'tbody', 'td', 'th', 'thead', 'tr', 'ul']);

/** Every attribute the renderer wrote, as `tag name=value`. */
function attributes(html: string): string[] {
  const out: string[] = [];
  for (const tag of html.matchAll(/<([a-z0-9]+)((?:\s+[^\s=>]+="[^"]*")*)\s*>/g)) {
    for (const a of tag[2]!.matchAll(/([^\s=]+)="([^"]*)"/g)) out.push(`${tag[1]} ${a[1]}=${a[2]}`);
  }
  return out;
}

describe('front matter', () => {
  it('drops the YAML block at the top that model cards carry', () => {
    const card = '---\nlicense: apache-2.0\ntags:\n- gguf\n---\n# Qwen3-8B\n\nText.';
    expect(stripFrontMatter(card)).toBe('# Qwen3-8B\n\nText.');
    expect(renderMarkdown(card)).toBe('<h1>Qwen3-8B</h1><p>Text.</p>');
  });
  it('keeps a rule that is not at the very top, and an unclosed block', () => {
    expect(stripFrontMatter('Intro\n---\nx: 1\n---\n')).toBe('Intro\n---\nx: 1\n---\n');
    expect(stripFrontMatter('---\nnever closed')).toBe('---\nnever closed');
    expect(renderMarkdown('\uFEFF---\r\na: 1\r\n---\r\nBody')).toBe('<p>Body</p>');
  });
});

describe('blocks', () => {
  it('renders headings, paragraphs and rules', () => {
    expect(renderMarkdown('# One\n## Two ##\n###### Six\n\nA line\nand more.\n\n---\n\nEnd')).toBe(
      '<h1>One</h1><h2>Two</h2><h6>Six</h6><p>A line\nand more.</p><hr><p>End</p>',
    );
    expect(renderMarkdown('Title\n=====\n\nSub\n---')).toBe('<h1>Title</h1><h2>Sub</h2>');
    expect(renderMarkdown('#NoSpace')).toBe('<p>#NoSpace</p>');
  });

  it('renders fenced code verbatim, escaped, with a language class', () => {
    const html = renderMarkdown('```bash\nllama-server -m x.gguf --port 8080 **not bold** <b>\n```\nafter');
    expect(html).toBe('<pre><code class="language-bash">llama-server -m x.gguf --port 8080 **not bold** &lt;b&gt;</code></pre><p>after</p>');
    expect(renderMarkdown('~~~\nrun to the end')).toBe('<pre><code>run to the end</code></pre>');
    expect(renderMarkdown('```py"><script>\nx\n```')).toBe('<pre><code class="language-pyscript">x</code></pre>');
  });

  it('renders bullet and numbered lists, nested, tight and loose', () => {
    expect(renderMarkdown('- one\n- two\n  - two.a\n- three')).toBe('<ul><li>one</li><li>two\n<ul><li>two.a</li></ul></li><li>three</li></ul>');
    expect(renderMarkdown('3. c\n4. d')).toBe('<ol start="3"><li>c</li><li>d</li></ol>');
    expect(renderMarkdown('1. a\n\n2. b')).toBe('<ol><li><p>a</p></li><li><p>b</p></li></ol>');
    expect(renderMarkdown('Before:\n- x\n- y')).toBe('<p>Before:</p><ul><li>x</li><li>y</li></ul>');
    expect(renderMarkdown('- [x] done\n- [ ] to do')).toBe('<ul><li>☑ done</li><li>☐ to do</li></ul>');
    expect(renderMarkdown('- a\nlazy line')).toBe('<ul><li>a\nlazy line</li></ul>');
  });

  it('renders a simple table with alignment', () => {
    const html = renderMarkdown('| Quant | Size |\n|:--|--:|\n| Q4_K_M | 4.9 GB |\n| `Q8_0` | 8.5 GB |');
    expect(html).toBe(
      '<table><thead><tr><th style="text-align:left">Quant</th><th style="text-align:right">Size</th></tr></thead>' +
        '<tbody><tr><td style="text-align:left">Q4_K_M</td><td style="text-align:right">4.9 GB</td></tr>' +
        '<tr><td style="text-align:left"><code>Q8_0</code></td><td style="text-align:right">8.5 GB</td></tr></tbody></table>',
    );
  });

  it('needs as many rule cells as header cells for a table', () => {
    expect(renderMarkdown('a | b\n---')).toBe('<h2>a | b</h2>');
  });

  it('renders block quotes', () => {
    expect(renderMarkdown('> [!NOTE]\n> Use **Q4**.')).toBe('<blockquote><p>[!NOTE]\nUse <strong>Q4</strong>.</p></blockquote>');
  });
});

describe('inline', () => {
  it('renders emphasis and code, leaving snake_case alone', () => {
    expect(inline('**bold** and *it* and __b__ and _i_ and ~~gone~~')).toBe(
      '<strong>bold</strong> and <em>it</em> and <strong>b</strong> and <em>i</em> and <del>gone</del>',
    );
    expect(inline('n_gpu_layers and snake_case_name')).toBe('n_gpu_layers and snake_case_name');
    expect(inline('`a **b** <c>`')).toBe('<code>a **b** &lt;c&gt;</code>');
    expect(inline('\\*not it\\*')).toBe('*not it*');
    expect(inline('2 * 3 * 4')).toBe('2 * 3 * 4');
  });

  it('links to http(s) addresses in a new tab without the opener', () => {
    expect(inline('[the hub](https://huggingface.co/x?a=1&b=2)')).toBe(
      '<a href="https://huggingface.co/x?a=1&amp;b=2" target="_blank" rel="noopener noreferrer">the hub</a>',
    );
    expect(inline('see https://example.com/a_b_c.')).toBe(
      'see <a href="https://example.com/a_b_c" target="_blank" rel="noopener noreferrer">https://example.com/a_b_c</a>.',
    );
    expect(inline('<https://example.com>')).toBe('<a href="https://example.com" target="_blank" rel="noopener noreferrer">https://example.com</a>');
    expect(inline('[t](http://x.org "Title")')).toBe('<a href="http://x.org" target="_blank" rel="noopener noreferrer">t</a>');
  });

  it('shows images from http(s) addresses, and a badge inside a link', () => {
    expect(inline('![logo](https://x.org/logo.png)')).toBe('<img src="https://x.org/logo.png" alt="logo" loading="lazy" referrerpolicy="no-referrer">');
    expect(inline('[![badge](https://img.shields.io/b.svg)](https://discord.gg/x)')).toBe(
      '<a href="https://discord.gg/x" target="_blank" rel="noopener noreferrer"><img src="https://img.shields.io/b.svg" alt="badge" loading="lazy" referrerpolicy="no-referrer"></a>',
    );
  });

  it('keeps only the text of links and images whose address is not absolute http(s)', () => {
    expect(inline('[LICENSE](LICENSE)')).toBe('LICENSE');
    expect(inline('[x](./docs/a.md)')).toBe('x');
    expect(inline('![chart](images/chart.png)')).toBe('chart');
    expect(inline('[x](//evil.example/a)')).toBe('x');
    expect(inline('[x](ftp://a/b)')).toBe('x');
  });
});

describe('hostile input', () => {
  it('escapes raw HTML: a script, an image with onerror, an iframe', () => {
    const html = renderMarkdown('<script>alert(1)</script>\n\n<img src=x onerror="alert(1)">\n\n<iframe src="http:x"></iframe>');
    expect(html).toBe(
      '<p>&lt;script&gt;alert(1)&lt;/script&gt;</p><p>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</p><p>&lt;iframe src=&quot;http:x&quot;&gt;&lt;/iframe&gt;</p>',
    );
    expect(tags(html)).toEqual(['p']);
    // An address inside escaped HTML is still just an address.
    expect(renderMarkdown('<iframe src="https://evil.example"></iframe>')).toBe(
      '<p>&lt;iframe src=&quot;<a href="https://evil.example" target="_blank" rel="noopener noreferrer">https://evil.example</a>&quot;&gt;&lt;/iframe&gt;</p>',
    );
  });

  it('turns javascript:, data: and vbscript: links into text', () => {
    for (const url of ['javascript:alert(1)', 'JavaScript:alert(1)', ' javascript:alert(1)', 'data:text/html;base64,PHNjcmlwdD4=', 'vbscript:msgbox(1)', 'java&#115;cript:alert(1)']) {
      const html = renderMarkdown(`[x](${url}) ![y](${url})`);
      expect(html).not.toMatch(/href=|src=/);
    }
    expect(renderMarkdown('[x](javascript:alert(1))')).toBe('<p>[x](javascript:alert(1))</p>');
    expect(renderMarkdown('[x](javascript:void+0)')).toBe('<p>x</p>');
  });

  it('lets no quote out of an attribute', () => {
    const cases = [
      '[x](https://a.org/"onmouseover="alert(1))',
      "[x](https://a.org/'onmouseover='alert(1))",
      '![a" onerror="alert(1)](https://a.org/i.png)',
      '![`code" onerror=x`](https://a.org/i.png)',
      'https://a.org[x](https://b.org/onmouseover=alert`1`)',
      'https://a.org`x" onclick="y`',
      '<https://a.org/"><script>x</script>>',
      '\u00000\u0000[x](https://a.org)',
    ];
    for (const c of cases) {
      const html = renderMarkdown(c);
      for (const a of attributes(html)) {
        expect(a).toMatch(/^(a href=https?:\/\/[^"'<>\s]*|a target=_blank|a rel=noopener noreferrer|img src=https?:\/\/[^"'<>\s]*|img alt=[^"<>]*|img loading=lazy|img referrerpolicy=no-referrer)$/);
      }
      for (const t of tags(html)) expect(OURS.has(t), `${t} in ${html}`).toBe(true);
      // Outside quoted attribute values, no event handler attribute.
      expect(html.replace(/="[^"]*"/g, '=""')).not.toMatch(/<[a-z]+[^>]*\son[a-z]+=/i);
    }
  });

  it('ignores slot markers in the input', () => {
    expect(inline('\u00000\u0000 `x`')).toBe('0 <code>x</code>');
  });

  it('renders deep nesting and long unmatched markers quickly', () => {
    const deep = Array.from({ length: 5000 }, (_, i) => ' '.repeat(i * 2) + '- x').join('\n');
    const quotes = '>'.repeat(20000) + ' q';
    const stars = '**a '.repeat(50_000);
    const brackets = '['.repeat(100_000);
    const ticks = '`` ` '.repeat(40_000);
    const comments = '<!-- '.repeat(100_000);
    const started = Date.now();
    for (const t of [deep, quotes, stars, brackets, ticks, comments]) renderMarkdown(t);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('cuts a card past the size limit and says so', () => {
    const html = renderMarkdown('a'.repeat(MAX_CARD_CHARS + 10));
    expect(html).toMatch(/The card is cut here/);
  });

  it('escapes the five characters', () => {
    expect(escapeHtml(`<a href="x" title='y'>&</a>`)).toBe('&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  });
});
