// A reply's Markdown as HTML that is safe to insert. Model output is untrusted: it goes through the
// model card renderer (lib/hub/markdown), which escapes every character of the input before it adds
// its own markup, so raw HTML in a reply shows as text. On top of that, for chat: code blocks are
// highlighted (highlight.js, a few common languages; its output is escaped text in spans) and get a
// header with the language and a Copy button; and images are links, never loaded by themselves —
// a reply could otherwise send what the conversation holds to any address by naming it as an
// image.

import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import dockerfile from 'highlight.js/lib/languages/dockerfile';
import go from 'highlight.js/lib/languages/go';
import ini from 'highlight.js/lib/languages/ini';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';
import { escapeHtml, renderMarkdown } from '../hub/markdown';

const LANGUAGES = { bash, c, cpp, css, diff, dockerfile, go, ini, java, javascript, json, markdown, python, rust, shell, sql, typescript, xml, yaml };
for (const [name, lang] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, lang);

/** Code longer than this is shown plain: highlighting runs again at every streamed token. */
const MAX_HIGHLIGHT_CHARS = 100_000;

export function unescapeHtml(html: string): string {
  return html.replace(/&(amp|lt|gt|quot|#39);/g, (_m, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" })[e]!);
}

/** A code block's text as highlighted HTML (escaped text in `hljs-*` spans), or escaped plain text
 *  for a language we do not have. */
export function highlightCode(code: string, lang: string): string {
  if (lang && code.length <= MAX_HIGHLIGHT_CHARS && hljs.getLanguage(lang)) {
    try {
      return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
    } catch {
      // A grammar that chokes on half a block (while streaming): plain text.
    }
  }
  return escapeHtml(code);
}

// The renderer writes exactly these shapes for code blocks and images; the input cannot, since
// every `<` of it is escaped.
const CODE_BLOCK = /<pre><code(?: class="language-([\w+-]{1,32})")?>([\s\S]*?)<\/code><\/pre>/g;
const IMAGE = /<img src="([^"]*)" alt="([^"]*)" loading="lazy" referrerpolicy="no-referrer">/g;

function codeBlock(lang: string, escapedCode: string): string {
  const code = unescapeHtml(escapedCode);
  const known = lang !== '' && hljs.getLanguage(lang) != null;
  const label = lang ? escapeHtml(lang) : 'text';
  return (
    `<div class="code-block"><div class="code-head"><span class="code-lang">${label}</span>` +
    `<button type="button" class="code-copy" data-copy-code>Copy</button></div>` +
    `<pre><code class="hljs${known ? ` language-${lang}` : ''}">${highlightCode(code, lang)}</code></pre></div>`
  );
}

/** A reply (or a user's message) as HTML to insert. */
export function renderChatMarkdown(text: string): string {
  const html = renderMarkdown(text, { frontMatter: false });
  return html
    .replace(CODE_BLOCK, (_m, lang: string | undefined, code: string) => codeBlock((lang ?? '').toLowerCase(), code))
    .replace(
      IMAGE,
      (_m, src: string, alt: string) =>
        `<a href="${src}" target="_blank" rel="noopener noreferrer" class="image-link" title="An image the reply names; not loaded">🖼 ${alt || src}</a>`,
    );
}
