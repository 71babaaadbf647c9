// A run's report as one download: the daemon's Markdown export with a "Charts" section added that
// shows each chart the page drew for the run, and those charts as PNG files beside it, all in a
// ZIP (report.md, charts/<name>.png) that opens as a document with its pictures anywhere
// Markdown is read.

import { zip } from '../export/zip';
import type { ShelvedChart } from '../charts/shelf';

export interface ReportChart {
  title: string;
  /** The name its own "Save PNG" uses: "benchmark-12-tiny-ttft.png". */
  fileName: string;
  png: Blob;
}

/** Each chart's path in the archive, "charts/<name>.png": its file name without the run's own
 *  prefix (`benchmark-12-tiny-`), made unique with "-2", "-3" where two would collide. */
export function chartPaths(fileNames: readonly string[], runPrefix: string): string[] {
  const used = new Set<string>();
  return fileNames.map((f) => {
    const base = f.replace(/\.png$/i, '');
    let name = base.startsWith(`${runPrefix}-`) && base.length > runPrefix.length + 1 ? base.slice(runPrefix.length + 1) : base;
    if (name === '') name = 'chart';
    let unique = name;
    for (let n = 2; used.has(unique); n++) unique = `${name}-${n}`;
    used.add(unique);
    return `charts/${unique}.png`;
  });
}

/** Text safe inside a Markdown image's alt text. */
function altText(title: string): string {
  return title.replace(/[[\]\\]/g, (c) => `\\${c}`).replace(/\s+/g, ' ');
}

/** The daemon's Markdown with a "Charts" section: a heading and the picture for each chart. */
export function reportMarkdown(markdown: string, charts: readonly { title: string; path: string }[]): string {
  if (charts.length === 0) return markdown;
  const body = markdown.replace(/\s+$/, '');
  const sections = charts.map((c) => `### ${c.title.replace(/\s+/g, ' ')}\n\n![${altText(c.title)}](${c.path})\n`);
  return `${body}\n\n## Charts\n\n${sections.join('\n')}`;
}

/** The report's ZIP: report.md first, then the charts' PNGs. */
export async function reportZip(markdown: string, charts: readonly ReportChart[], runPrefix: string, modified = new Date()): Promise<Uint8Array<ArrayBuffer>> {
  const paths = chartPaths(
    charts.map((c) => c.fileName),
    runPrefix,
  );
  const pngs = await Promise.all(charts.map(async (c) => new Uint8Array(await c.png.arrayBuffer())));
  const md = reportMarkdown(
    markdown,
    charts.map((c, i) => ({ title: c.title, path: paths[i]! })),
  );
  return zip([{ name: 'report.md', data: md }, ...pngs.map((data, i) => ({ name: paths[i]!, data }))], modified);
}

/** The shelf's charts as PNGs, in its order; a chart with nothing drawn, or whose PNG could not
 *  be made, is left out rather than failing the report. */
export async function shelvedPngs(charts: readonly ShelvedChart[]): Promise<ReportChart[]> {
  const made = await Promise.allSettled(charts.map((c) => c.png() ?? Promise.reject(new Error('nothing drawn'))));
  return charts.flatMap((c, i) => {
    const r = made[i]!;
    return r.status === 'fulfilled' ? [{ title: c.title, fileName: c.fileName, png: r.value }] : [];
  });
}
