// A run's context as a tree of labelled values, and its command line on its own.

import { describe, expect, it } from 'vitest';
import { commandLine, contextTree, keyLabel } from './context';

describe('contextTree', () => {
  const context = {
    target: { kind: 'profile', name: 'qwen' },
    command_line: 'llama-server -m /m/q.gguf',
    extra_args: ['--flash-attn', 'on'],
    planned_memory: [{ gpu: 0, bytes: 1024 }],
    model: { file: '/m/q.gguf', quantization: 'Q4_K_M', bits_per_weight: 4.85 },
    hardware_before: { gpus: [{ index: 0, name: 'RTX 3090', throttle_reasons: [] }], memory: null },
  };

  it('labels keys in words and lists plain arrays on one line', () => {
    const tree = contextTree(context);
    expect(tree.map((n) => n.label)).toEqual(['target', 'extra arguments', 'planned memory', 'model', 'hardware before']);
    expect(tree[1]).toEqual({ label: 'extra arguments', value: '--flash-attn on', children: [] });
    expect(tree[2]!.children[0]!.label).toBe('GPU 0');
    expect(tree[3]!.children.find((c) => c.label === 'bits per weight')?.value).toBe('4.85');
    const gpu = tree[4]!.children[0]!.children[0]!;
    expect(gpu.label).toBe('GPU 0 · RTX 3090');
    expect(gpu.children.find((c) => c.label === 'throttle reasons')?.value).toBe('none');
    expect(tree[4]!.children[1]).toEqual({ label: 'memory', value: '—', children: [] });
    expect(keyLabel('cuda_driver_version')).toBe('cuda driver version');
  });

  it('writes bits per weight with two decimals, as the model pages do', () => {
    const tree = contextTree({ model: { bits_per_weight: 4.852349853515625 }, parameters: 268098176 });
    expect(tree[0]!.children[0]).toEqual({ label: 'bits per weight', value: '4.85', children: [] });
    expect(tree[1]!.value, 'other numbers as they are').toBe('268098176');
  });

  it('takes the command line out', () => {
    expect(commandLine(context)).toBe('llama-server -m /m/q.gguf');
    expect(commandLine({ command_line: null })).toBeNull();
    expect(contextTree({ command_line: 'x' })).toEqual([]);
  });
});
