import { describe, expect, it } from 'vitest';
import { countdown, expiryText, inviteBody, joinCodeHint, joinCommand, removeWarning, shortFingerprint } from './pairing';

const FINGERPRINT = Array.from({ length: 32 }, (_, i) => (i * 7 + 16).toString(16).toUpperCase().padStart(2, '0')).join(':');

describe('joinCodeHint', () => {
  it('asks for a code when nothing is pasted', () => {
    expect(joinCodeHint('  ')).toMatch(/Paste the code/);
  });

  it('says a join code starts with rdk1-', () => {
    expect(joinCodeHint('abcdef')).toMatch(/starts with “rdk1-”/);
    expect(joinCodeHint('rdk2-aaaa')).toMatch(/starts with “rdk1-”/);
  });

  it('names a character that codes never contain', () => {
    expect(joinCodeHint('rdk1-' + 'a'.repeat(50) + '0' + 'a'.repeat(70))).toMatch(/“0” never appears/);
  });

  it('tells a code cut short', () => {
    expect(joinCodeHint('rdk1-abcdefgh')).toMatch(/cut short/);
  });

  it('lets a whole code through, whatever its case and spaces from a wrapped paste', () => {
    const body = 'abcdefgh234567'.repeat(9);
    expect(joinCodeHint(`rdk1-${body}`)).toBeNull();
    expect(joinCodeHint(` RDK1-${body.slice(0, 60)}\n${body.slice(60).toUpperCase()} `)).toBeNull();
  });
});

describe('shortFingerprint', () => {
  it('keeps the first four and last two pairs', () => {
    const pairs = FINGERPRINT.split(':');
    expect(shortFingerprint(FINGERPRINT)).toBe(`${pairs.slice(0, 4).join(':')}:…:${pairs[30]}:${pairs[31]}`);
  });

  it('leaves a short text alone', () => {
    expect(shortFingerprint('AB:CD')).toBe('AB:CD');
  });
});

describe('expiryText', () => {
  const now = 1_800_000_000_000;

  it('counts down in minutes and seconds under an hour', () => {
    expect(expiryText(now + 598_400, now)).toBe('expires in 9 min 58 s');
    expect(expiryText(now + 42_000, now)).toBe('expires in 42 s');
  });

  it('counts hours and minutes for a long-lived code', () => {
    expect(expiryText(now + (3 * 3600 + 2 * 60 + 5) * 1000, now)).toBe('expires in 3 h 2 min');
  });

  it('says when the code expired', () => {
    expect(expiryText(now, now)).toBe('expired 0 s ago');
    expect(expiryText(now - 5_000, now)).toBe('expired 5 s ago');
  });

  it('never counts below zero', () => {
    expect(countdown(-3000)).toBe('0 s');
  });
});

describe('inviteBody', () => {
  it('sends a typed address, trimmed, and leaves it out when blank', () => {
    expect(inviteBody(' 10.0.0.5:7879 ', 600)).toEqual({ address: '10.0.0.5:7879', ttl_secs: 600 });
    expect(inviteBody('   ', 3600)).toEqual({ ttl_secs: 3600 });
  });
});

describe('joinCommand and removeWarning', () => {
  it('gives the other side’s command', () => {
    expect(joinCommand('rdk1-xyz')).toBe('rigdeck fleet join rdk1-xyz');
  });

  it('says the other side will be refused from now on', () => {
    expect(removeWarning({ name: 'tower', role: 'rig' })).toMatch(/rig “tower”.*this desk refuses it/);
    expect(removeWarning({ name: 'laptop', role: 'desk' })).toMatch(/desk “laptop”.*this rig refuses it/);
  });
});
