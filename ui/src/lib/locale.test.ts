// The language fallback that keeps charts working under a C locale.
import { describe, expect, it } from 'vitest';
import { usableLanguage } from './locale';

describe('usableLanguage', () => {
  it('keeps a valid language tag', () => {
    expect(usableLanguage('de-DE')).toBe('de-DE');
  });
  it('replaces what Intl rejects or what is missing', () => {
    expect(usableLanguage('C')).toBe('en-US');
    expect(usableLanguage('')).toBe('en-US');
    expect(usableLanguage(undefined)).toBe('en-US');
  });
});
