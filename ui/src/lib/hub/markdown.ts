// A model card (a README from the internet) as HTML that is safe to insert: every character of the
// input is HTML-escaped before any markup is added, and the only markup added is our own —
// headings, paragraphs, emphasis, code, lists, quotes, simple tables, and links and images whose
// address is absolute http(s) (no javascript:, data: or relative addresses). Raw HTML in a card
// shows as text; YAML front matter (the hub's metadata block) is dropped. No dependency: a
// Markdown library with an HTML sanitizer is a large surface for a small page.

/** Past this much text the card is cut (the hub allows 2 MB; real cards are far smaller). */
export const MAX_CARD_CHARS = 512 * 1024;
/** Nested lists and quotes deeper than this are shown flat, so hostile nesting cannot recurse far. */
const MAX_DEPTH = 12;
/** Inline spans (emphasis, link text) longer than this are left as written: bounded patterns keep
 *  a hostile line from taking quadratic time. */
const SPAN = 600;

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** An address as it stands in already-escaped text, kept only when absolute http(s). */
function safeUrl(escaped: string): string | null {
  return /^https?:\/\/[^\s]+$/i.test(escaped) ? escaped : null;
}

/** The front matter block (`---` … `---` or `...`) at the very top, which model cards carry. */
export function stripFrontMatter(text: string): string {
  const m = /^\uFEFF?---[ \t]*\n[\s\S]*?\n(?:---|\.\.\.)[ \t]*(?:\n|$)/.exec(text);
  return m ? text.slice(m[0].length) : text;
}

// ---- Inline ----

const EMPHASIS: [RegExp, string][] = [
  [new RegExp(`\\*\\*(?=\\S)([\\s\\S]{0,${SPAN}}?\\S)\\*\\*`, 'g'), '<strong>$1</strong>'],
  [new RegExp(`(^|[^\\w])__(?=\\S)([\\s\\S]{0,${SPAN}}?\\S)__(?!\\w)`, 'g'), '$1<strong>$2</strong>'],
  [new RegExp(`\\*(?=[^\\s*])([^*]{0,${SPAN}}?[^\\s*])\\*`, 'g'), '<em>$1</em>'],
  // Underscores inside words (snake_case names) are not emphasis.
  [new RegExp(`(^|[^\\w])_(?=[^\\s_])([^_]{0,${SPAN}}?[^\\s_])_(?!\\w)`, 'g'), '$1<em>$2</em>'],
  [new RegExp(`~~(?=\\S)([\\s\\S]{0,${SPAN}}?\\S)~~`, 'g'), '<del>$1</del>'],
];

function emphasis(escaped: string): string {
  let s = escaped;
  for (const [re, to] of EMPHASIS) s = s.replace(re, to);
  return s;
}

// After escaping, a URL's `&` reads `&amp;`; any other entity (a quote, `<`) ends it, and so does a
// slot marker: a slot's HTML must never land inside an attribute.
const URL_TEXT = '(?:[^\\s&()\\u0000]|&amp;)+';
const IMAGE = new RegExp(`!\\[([^\\]\\n]{0,${SPAN}})\\]\\(\\s*(${URL_TEXT})(?:\\s+&quot;[^\\n]{0,${SPAN}}?&quot;)?\\s*\\)`, 'g');
const LINK = new RegExp(`\\[([^\\]\\n]{0,${SPAN}})\\]\\(\\s*(${URL_TEXT})(?:\\s+&quot;[^\\n]{0,${SPAN}}?&quot;)?\\s*\\)`, 'g');
const ANGLE_LINK = /&lt;(https?:\/\/(?:[^\s&\u0000]|&amp;)+)&gt;/gi;
const BARE_LINK = /\bhttps?:\/\/(?:[^\s&<\u0000]|&amp;)+/gi;

/** One paragraph's (heading's, cell's) text as HTML. */
export function inline(text: string): string {
  // Generated HTML waits in slots until the end, so later patterns (an underscore in a URL, say)
  // never touch it; a slot marker in the input itself is removed first.
  const slots: string[] = [];
  const hold = (html: string) => `\u0000${slots.push(html) - 1}\u0000`;
  let s = text.replace(/\u0000/g, '');

  s = s.replace(new RegExp(`(\`+)([\\s\\S]{0,${SPAN * 4}}?[^\`])\\1(?!\`)`, 'g'), (_m, _ticks: string, code: string) =>
    hold(`<code>${escapeHtml(code.replace(/\n/g, ' ').trim())}</code>`),
  );
  s = s.replace(/\\([\\`*_{}[\]()#+\-.!|~<>])/g, (_m, c: string) => hold(escapeHtml(c)));
  s = escapeHtml(s);

  s = s.replace(IMAGE, (_m, alt: string, url: string) => {
    const src = safeUrl(url);
    // Alt text is an attribute: no slot (code, an escaped character) goes in there.
    const text = alt.replace(/\u0000\d+\u0000/g, '');
    return hold(src ? `<img src="${src}" alt="${text}" loading="lazy" referrerpolicy="no-referrer">` : text);
  });
  // A link's text may hold an image: a badge that links somewhere.
  s = s.replace(LINK, (_m, label: string, url: string) => {
    const href = safeUrl(url);
    return hold(href ? `<a href="${href}" target="_blank" rel="noopener noreferrer">${emphasis(label)}</a>` : emphasis(label));
  });
  s = s.replace(ANGLE_LINK, (_m, url: string) => hold(link(url)));
  s = s.replace(BARE_LINK, (url: string) => {
    // Sentence punctuation after an address is not part of it.
    const tail = /[.,;:!?'"]+$/.exec(url)?.[0] ?? '';
    const core = url.slice(0, url.length - tail.length);
    return hold(link(core)) + tail;
  });

  s = emphasis(s);
  // Two trailing spaces or a backslash end a line inside a paragraph.
  s = s.replace(/(?: {2,}|\\)\n/g, '<br>\n');

  // Slots may hold slots (a link around an image): fill until none is left.
  for (let i = 0; i < 8 && s.includes('\u0000'); i++) {
    s = s.replace(/\u0000(\d+)\u0000/g, (_m, n: string) => slots[Number(n)] ?? '');
  }
  return s;
}

function link(escapedUrl: string): string {
  return `<a href="${escapedUrl}" target="_blank" rel="noopener noreferrer">${escapedUrl}</a>`;
}

// ---- Blocks ----

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const TABLE_RULE = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

function isBlank(line: string): boolean {
  return line.trim() === '';
}

/** Cells of a table row, `\|` kept as a literal bar. */
function cells(row: string): string[] {
  let r = row.trim();
  if (r.startsWith('|')) r = r.slice(1);
  if (r.endsWith('|') && !r.endsWith('\\|')) r = r.slice(0, -1);
  return r.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function alignments(rule: string): (string | null)[] {
  return cells(rule).map((c) => {
    const left = c.startsWith(':');
    const right = c.endsWith(':');
    return left && right ? 'center' : right ? 'right' : left ? 'left' : null;
  });
}

interface ListMarker {
  indent: number;
  ordered: boolean;
  /** `-`, `*`, `+`, `.` or `)`: a different one starts a new list. */
  bullet: string;
  start: number;
  /** Where the item's text begins (its continuation lines are indented this far). */
  contentIndent: number;
  text: string;
}

function listMarker(line: string): ListMarker | null {
  const m = ITEM.exec(line);
  if (!m) return null;
  const indent = m[1]!.length;
  const marker = m[2]!;
  const ordered = /\d/.test(marker);
  const text = m[3] ?? '';
  const gap = line.length - indent - marker.length - text.length;
  return {
    indent,
    ordered,
    bullet: ordered ? marker.slice(-1) : marker,
    start: ordered ? parseInt(marker, 10) : 1,
    contentIndent: indent + marker.length + Math.min(Math.max(gap, 1), 4),
    text,
  };
}

/** Lines that end a paragraph without a blank line between. */
function startsBlock(line: string): boolean {
  if (FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)) return true;
  const m = listMarker(line);
  // "2019. A year" inside a sentence is not a list; a list inside a paragraph starts at 1.
  return m != null && m.text !== '' && (!m.ordered || m.start === 1);
}

function dedent(line: string, by: number): string {
  let i = 0;
  while (i < by && i < line.length && line[i] === ' ') i++;
  return line.slice(i);
}

function renderBlocks(lines: string[], depth: number, tight: boolean): string {
  const out: string[] = [];
  let para: string[] = [];
  const flush = () => {
    if (para.length === 0) return;
    const html = inline(para.join('\n').trim());
    out.push(tight ? html : `<p>${html}</p>`);
    para = [];
  };

  let i = 0;
  while (i < lines.length) {
    const line = lines[i]!;
    if (isBlank(line)) {
      flush();
      i++;
      continue;
    }

    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const mark = fence[1]!;
      const lang = fence[2]!.replace(/[^\w+-]/g, '').slice(0, 32);
      const body: string[] = [];
      i++;
      while (i < lines.length && !new RegExp(`^ {0,3}${mark[0] === '`' ? '`' : '~'}{${mark.length},}\\s*$`).test(lines[i]!)) {
        body.push(lines[i]!);
        i++;
      }
      i++; // the closing fence (or the end: an unclosed fence runs to the end)
      out.push(`<pre><code${lang ? ` class="language-${lang}"` : ''}>${escapeHtml(body.join('\n'))}</code></pre>`);
      continue;
    }

    // Setext headings: a paragraph underlined with === or ---.
    if (para.length > 0 && /^ {0,3}(=+|-+)[ \t]*$/.test(line)) {
      const level = line.trim().startsWith('=') ? 1 : 2;
      const text = para.join('\n').trim();
      para = [];
      out.push(`<h${level}>${inline(text)}</h${level}>`);
      i++;
      continue;
    }

    const heading = HEADING.exec(line);
    if (heading) {
      flush();
      const level = heading[1]!.length;
      out.push(`<h${level}>${inline(heading[2] ?? '')}</h${level}>`);
      i++;
      continue;
    }

    if (RULE.test(line)) {
      flush();
      out.push('<hr>');
      i++;
      continue;
    }

    if (QUOTE.test(line)) {
      flush();
      const body: string[] = [];
      while (i < lines.length && !isBlank(lines[i]!)) {
        const q = QUOTE.exec(lines[i]!);
        // A line without `>` continues the quote's paragraph (lazy continuation).
        body.push(q ? q[1]! : lines[i]!);
        i++;
      }
      out.push(
        depth < MAX_DEPTH
          ? `<blockquote>${renderBlocks(body, depth + 1, false)}</blockquote>`
          : `<blockquote><p>${inline(body.join('\n'))}</p></blockquote>`,
      );
      continue;
    }

    // A table: a header row with bars, then a rule row of dashes with as many cells.
    const rule = lines[i + 1];
    if (para.length === 0 && line.includes('|') && rule != null && TABLE_RULE.test(rule) && rule.includes('-') && cells(rule).length === cells(line).length) {
      const head = cells(line);
      const align = alignments(rule);
      const attr = (c: number) => (align[c] ? ` style="text-align:${align[c]}"` : '');
      const rows: string[][] = [];
      i += 2;
      while (i < lines.length && !isBlank(lines[i]!) && lines[i]!.includes('|')) {
        rows.push(cells(lines[i]!));
        i++;
      }
      const th = head.map((c, n) => `<th${attr(n)}>${inline(c)}</th>`).join('');
      const trs = rows
        .map((r) => `<tr>${head.map((_, n) => `<td${attr(n)}>${inline(r[n] ?? '')}</td>`).join('')}</tr>`)
        .join('');
      out.push(`<table><thead><tr>${th}</tr></thead><tbody>${trs}</tbody></table>`);
      continue;
    }

    const first = listMarker(line);
    if (first && (para.length === 0 || startsBlock(line))) {
      flush();
      const items: string[][] = [];
      let loose = false;
      let current: string[] = [first.text];
      let contentIndent = first.contentIndent;
      let sawBlank = false;
      i++;
      while (i < lines.length) {
        const l = lines[i]!;
        if (isBlank(l)) {
          sawBlank = true;
          current.push('');
          i++;
          continue;
        }
        const m = listMarker(l);
        const indent = l.length - l.trimStart().length;
        if (m && m.indent < contentIndent && m.ordered === first.ordered && m.bullet === first.bullet) {
          // The next item of this list.
          if (sawBlank) loose = true;
          items.push(current);
          current = [m.text];
          contentIndent = m.contentIndent;
          sawBlank = false;
        } else if (indent >= contentIndent) {
          if (sawBlank) loose = true;
          current.push(dedent(l, contentIndent));
          sawBlank = false;
        } else if (!sawBlank && !m && !startsBlock(l)) {
          // Lazy continuation of the item's paragraph.
          current.push(l.trim());
        } else {
          break;
        }
        i++;
      }
      items.push(current);
      const tag = first.ordered ? 'ol' : 'ul';
      const start = first.ordered && first.start !== 1 ? ` start="${first.start}"` : '';
      const lis = items.map((item) => {
        while (item.length > 0 && isBlank(item[item.length - 1]!)) item.pop();
        const task = /^\[([ xX])\][ \t]+/.exec(item[0] ?? '');
        if (task) item[0] = (task[1] === ' ' ? '☐ ' : '☑ ') + item[0]!.slice(task[0].length);
        const body = depth < MAX_DEPTH ? renderBlocks(item, depth + 1, !loose) : inline(item.join('\n'));
        return `<li>${body}</li>`;
      });
      out.push(`<${tag}${start}>${lis.join('')}</${tag}>`);
      continue;
    }

    para.push(line);
    i++;
  }
  flush();
  // In a tight list item, a paragraph and a nested list sit on their own lines.
  return out.join(tight ? '\n' : '');
}

/** HTML comments (editors' notes, hidden badges) say nothing to a reader. A loop rather than a
 *  pattern: many `<!--` without an end must not take quadratic time. */
function stripComments(text: string): string {
  let out = '';
  let at = 0;
  for (;;) {
    const open = text.indexOf('<!--', at);
    if (open < 0) break;
    const close = text.indexOf('-->', open + 4);
    if (close < 0) break;
    out += text.slice(at, open);
    at = close + 3;
  }
  return out + text.slice(at);
}

/** A model card's Markdown as safe HTML (see the top of this file). `frontMatter: false` keeps a
 *  leading `---` block as text (a chat reply may well start with a rule). */
export function renderMarkdown(markdown: string, { frontMatter = true }: { frontMatter?: boolean } = {}): string {
  let text = markdown.replace(/\u0000/g, '').replace(/\r\n?/g, '\n');
  const cut = text.length > MAX_CARD_CHARS;
  if (cut) text = text.slice(0, MAX_CARD_CHARS);
  text = stripComments(frontMatter ? stripFrontMatter(text) : text).replace(/\t/g, '    ');
  const html = renderBlocks(text.split('\n'), 0, false);
  return cut ? `${html}<p><em>The card is cut here: it is longer than ${MAX_CARD_CHARS / 1024} KiB.</em></p>` : html;
}
