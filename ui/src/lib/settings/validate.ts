// Client-side checks that mirror the daemon's settings rules, so obvious mistakes are caught before
// a round trip. The daemon stays the authority: its own error message is still shown verbatim.

export const PERIOD_MIN_MS = 250;
export const PERIOD_MAX_MS = 60_000;

export function periodError(value: number | null | undefined): string | null {
  if (value == null || !Number.isFinite(value)) return 'Enter a number of milliseconds.';
  if (!Number.isInteger(value)) return 'Use whole milliseconds.';
  if (value < PERIOD_MIN_MS || value > PERIOD_MAX_MS) {
    return `The period must be between ${PERIOD_MIN_MS} and ${PERIOD_MAX_MS} ms.`;
  }
  return null;
}

export const RETENTION_MIN_DAYS = 1;
export const RETENTION_MAX_DAYS = 3650;

export function retentionError(value: number | null | undefined): string | null {
  if (value == null || !Number.isFinite(value)) return 'Enter a number of days.';
  if (!Number.isInteger(value)) return 'Use whole days.';
  if (value < RETENTION_MIN_DAYS || value > RETENTION_MAX_DAYS) {
    return `Keep between ${RETENTION_MIN_DAYS} and ${RETENTION_MAX_DAYS} days.`;
  }
  return null;
}

/** Trims entries, drops blanks and duplicates; the daemon checks that the folders are usable. */
export function normalizeFolders(folders: readonly string[]): string[] {
  const out: string[] = [];
  for (const f of folders) {
    const p = f.trim();
    if (p && !out.includes(p)) out.push(p);
  }
  return out;
}

export type DownloadChoice = 'cache' | 'folder';

/** The PUT body for the download folder: "" goes back to the Hugging Face cache; a folder is sent
 *  trimmed (the daemon refuses a relative path with its own message); null while the folder
 *  box is empty (nothing to save yet). */
export function downloadFolderPatch(choice: DownloadChoice, text: string): { download_folder: string } | null {
  if (choice === 'cache') return { download_folder: '' };
  const folder = text.trim();
  return folder ? { download_folder: folder } : null;
}
