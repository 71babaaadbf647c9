// "Connect to another rig" URL building and settings validation.

import { describe, expect, it } from 'vitest';
import { rigLoginUrl } from './rigUrl';
import { downloadFolderPatch, normalizeFolders, periodError, retentionError } from './validate';

describe('rigLoginUrl', () => {
  it('builds <url>/login?token=<token>', () => {
    expect(rigLoginUrl('http://192.168.1.20:7878', 'abc')).toEqual({ ok: true, url: 'http://192.168.1.20:7878/login?token=abc' });
    expect(rigLoginUrl(' https://rig.lan/ ', ' abc ')).toEqual({ ok: true, url: 'https://rig.lan/login?token=abc' });
  });
  it('keeps a path prefix and encodes the token', () => {
    expect(rigLoginUrl('https://proxy.lan/rigdeck/', 'a+b/c=')).toEqual({ ok: true, url: 'https://proxy.lan/rigdeck/login?token=a%2Bb%2Fc%3D' });
  });
  it('refuses anything but http(s)', () => {
    expect(rigLoginUrl('javascript:alert(1)', 't').ok).toBe(false);
    expect(rigLoginUrl('file:///etc/passwd', 't').ok).toBe(false);
    expect(rigLoginUrl('ftp://rig', 't').ok).toBe(false);
  });
  it('refuses a bare host name or an empty field', () => {
    expect(rigLoginUrl('192.168.1.20:7878', 't').ok).toBe(false);
    expect(rigLoginUrl('', 't').ok).toBe(false);
    expect(rigLoginUrl('http://rig', '  ').ok).toBe(false);
  });
});

describe('settings validation', () => {
  it('accepts 250–60000 ms whole numbers', () => {
    expect(periodError(250)).toBeNull();
    expect(periodError(60_000)).toBeNull();
    expect(periodError(249)).toMatch(/between 250 and 60000/);
    expect(periodError(60_001)).toMatch(/between/);
    expect(periodError(500.5)).toMatch(/whole/);
    expect(periodError(null)).toMatch(/number/);
  });
  it('keeps usage 1–3650 whole days, as the daemon does', () => {
    expect(retentionError(1)).toBeNull();
    expect(retentionError(3650)).toBeNull();
    expect(retentionError(0)).toMatch(/between 1 and 3650/);
    expect(retentionError(3651)).toMatch(/between/);
    expect(retentionError(90.5)).toMatch(/whole/);
    expect(retentionError(null)).toMatch(/number/);
  });
  it('trims, drops blanks and duplicates in the folder list', () => {
    expect(normalizeFolders([' /a ', '', '/b', '/a', '  '])).toEqual(['/a', '/b']);
  });
  it('sends the download folder trimmed, or "" for the Hugging Face cache', () => {
    expect(downloadFolderPatch('cache', '/data/downloads')).toEqual({ download_folder: '' });
    expect(downloadFolderPatch('folder', ' /data/downloads ')).toEqual({ download_folder: '/data/downloads' });
    // Nothing to save while the box is empty.
    expect(downloadFolderPatch('folder', '  ')).toBeNull();
    // A relative path goes to the daemon, whose message says what to write instead.
    expect(downloadFolderPatch('folder', 'models')).toEqual({ download_folder: 'models' });
  });
});
