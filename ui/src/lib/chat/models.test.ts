// The model picker's reading of a model, the conversation's model by name or alias, the default
// for a new chat, and a new conversation's title.

import { describe, expect, it } from 'vitest';
import { chatModel } from '../../test/chat';
import { defaultModel, findModel, modelChoice, templateWarning, titleFrom } from './models';

describe('model choices', () => {
  it('ready and loading models can be chosen', () => {
    expect(modelChoice(chatModel('a'))).toMatchObject({ selectable: true, note: 'ready', tone: 'ok' });
    expect(modelChoice(chatModel('a', { state: 'loading' })).selectable).toBe(true);
  });
  it('a stopped on-demand model loads on send', () => {
    expect(modelChoice(chatModel('a', { state: 'stopped', on_demand: true }))).toMatchObject({ selectable: true, note: 'stopped, loads when you send' });
  });
  it('a stopped model that is not on demand cannot be chosen, and says why', () => {
    const c = modelChoice(chatModel('a', { state: 'stopped' }));
    expect(c.selectable).toBe(false);
    expect(c.note).toMatch(/Engines page/);
    expect(modelChoice(chatModel('a', { state: 'crashed' })).tone).toBe('bad');
  });
  it('finds a model by name or alias', () => {
    const ms = [chatModel('qwen', { aliases: ['gpt-4o'] }), chatModel('tiny')];
    expect(findModel(ms, 'gpt-4o')?.name).toBe('qwen');
    expect(findModel(ms, 'tiny')?.name).toBe('tiny');
    expect(findModel(ms, 'gone')).toBeNull();
    expect(findModel(null, 'tiny')).toBeNull();
  });
  it('a new chat starts with the last model if usable, else a ready one', () => {
    const ms = [chatModel('off', { state: 'stopped' }), chatModel('lazy', { state: 'stopped', on_demand: true }), chatModel('up')];
    expect(defaultModel(ms, 'lazy')).toBe('lazy');
    expect(defaultModel(ms, 'off')).toBe('up');
    expect(defaultModel(ms, null)).toBe('up');
    expect(defaultModel([ms[0]!, ms[1]!], null)).toBe('lazy');
    expect(defaultModel([], null)).toBeNull();
  });
});

describe('titles', () => {
  it('take the first line, cut at a word', () => {
    expect(titleFrom('\n  Hello there  \nmore')).toBe('Hello there');
    const long = 'Explain how the KV cache grows with context length and why quantizing it helps on small cards';
    const t = titleFrom(long);
    expect(t.endsWith('…')).toBe(true);
    expect(t.length).toBeLessThanOrEqual(61);
    expect(long.startsWith(t.slice(0, -1))).toBe(true);
    expect(titleFrom('', 1)).toBe('Image');
    expect(titleFrom('  ')).toBe('New chat');
  });
});

describe('missing chat template', () => {
  it('names the file and the template to set', () => {
    const w = templateWarning(chatModel('gemma', { no_chat_template: true, suggested_chat_template: 'gemma' }));
    expect(w).toContain('This file carries no chat template: llama-server would use ChatML');
    expect(w).toContain('chat template to "gemma"');
  });
  it('still names the fix when no architecture template is known', () => {
    expect(templateWarning(chatModel('x', { no_chat_template: true, suggested_chat_template: null }))).toContain("set its profile's chat template on the Engines page");
  });
  it('is nothing for a model with a template, or none chosen', () => {
    expect(templateWarning(chatModel('q'))).toBeNull();
    expect(templateWarning(null)).toBeNull();
  });
});
