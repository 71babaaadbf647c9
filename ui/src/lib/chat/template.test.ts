// The sentence naming a GGUF without a chat template.

import { describe, expect, it } from 'vitest';
import { lacksChatTemplate, noTemplateLine, presetTemplate } from './template';

describe('a file without a chat template', () => {
  it('is told apart from one with a template and from an unknown one', () => {
    expect(lacksChatTemplate({ chat_template: null })).toBe(true);
    expect(lacksChatTemplate({ chat_template: { bytes: 1200, names: [] } })).toBe(false);
    expect(lacksChatTemplate({})).toBe(false);
    expect(lacksChatTemplate(null)).toBe(false);
  });
  it('names the architecture’s template when one is known', () => {
    expect(noTemplateLine({ chat_template: null, architecture: 'gemma3' }, { gemma3: 'gemma' })).toBe(
      'This file carries no chat template: llama-server would use ChatML; set the launch profile\'s chat template to "gemma" (gemma3\'s own).',
    );
    expect(noTemplateLine({ chat_template: null, architecture: 'glm-dsa' }, { gemma3: 'gemma' })).toContain('set a chat template in its launch profile');
    expect(noTemplateLine({ chat_template: { bytes: 9, names: [] }, architecture: 'gemma3' })).toBeNull();
  });
});

describe('the template a profile form starts with', () => {
  const arch = { gemma3: 'gemma', qwen3: 'chatml' };
  it('is the profile’s own choice first', () => {
    expect(presetTemplate('llama3', { chat_template: null, architecture: 'gemma3' }, arch)).toBe('llama3');
  });
  it('is the architecture’s own for a file without one', () => {
    expect(presetTemplate(null, { chat_template: null, architecture: 'gemma3' }, arch)).toBe('gemma');
    expect(presetTemplate(null, { chat_template: null, architecture: 'glm-dsa' }, arch)).toBe('');
  });
  it('is the file’s own (none named) when the file has one or is unknown', () => {
    expect(presetTemplate(null, { chat_template: { bytes: 10, names: [] }, architecture: 'qwen3' }, arch)).toBe('');
    expect(presetTemplate(undefined, null, arch)).toBe('');
  });
});
