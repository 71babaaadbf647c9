// Makes sure the browser reports a language that Intl accepts. WebKitGTK under a C or POSIX
// locale reports "C", and uPlot formats numbers with `new Intl.NumberFormat(navigator.language)`
// when its module loads, which then throws and leaves a blank page.

export function usableLanguage(language: string | undefined): string {
  if (!language) return 'en-US';
  try {
    new Intl.NumberFormat(language);
    return language;
  } catch {
    return 'en-US';
  }
}

/** Overrides `navigator.language` when it is not a valid BCP 47 tag. Call before loading charts. */
export function ensureUsableLanguage(): void {
  const usable = usableLanguage(navigator.language);
  if (usable !== navigator.language) {
    Object.defineProperty(navigator, 'language', { value: usable, configurable: true });
  }
}
