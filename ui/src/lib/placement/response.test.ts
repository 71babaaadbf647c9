// Reading plan answers and the copy text.

import { describe, expect, it } from 'vitest';
import { cpuSpec, devicePlan, gpuSpec, options, response } from '../../test/plans';
import { ceilingText, commandLine, copyText, parsePlanResponse, planResponseError } from './response';
import { contextFromResponse, layoutFromPlan } from './layout';

const sample = () =>
  response(
    [
      devicePlan(gpuSpec(0), { layers: [0, 1, 2, 3], expert_layers: [1, 2] }),
      devicePlan(gpuSpec(1), { layers: [4, 5, 6, 7], expert_layers: [4, 5] }),
      devicePlan(cpuSpec(), { expert_layers: [3, 6, 7] }),
    ],
    options({ tensor_split: [4, 5] }),
    8,
  );

describe('parsePlanResponse', () => {
  it('accepts what the daemon sends (through JSON)', () => {
    const r = parsePlanResponse(JSON.parse(JSON.stringify(sample())));
    expect(r.ok).toBe(true);
  });

  it('names what is missing', () => {
    expect(planResponseError(null)).toBe('the plan answer is not an object');
    const noDevices = sample();
    noDevices.report.plan.devices = [];
    expect(planResponseError(noDevices)).toBe('the plan has no devices');
    const badUsage = JSON.parse(JSON.stringify(sample()));
    delete badUsage.report.plan.devices[1].usage.kv_bytes;
    expect(planResponseError(badUsage)).toBe('a plan device has no kv_bytes');
    const noLine = JSON.parse(JSON.stringify(sample()));
    noLine.report.command_line = 'llama-server';
    expect(parsePlanResponse(noLine)).toEqual({ ok: false, error: 'the report has no command line' });
  });
});

describe('command line', () => {
  it('copies the daemon’s line exactly, quotes included', () => {
    const line = String.raw`llama-server -m /m/glm.gguf -ngl all -ts 23.11,23.11,23.11,0 -sm layer -ot 'blk\.(3|4)\.ffn_.*_exps=CUDA0' -ot '\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU' -c 32768`;
    expect(copyText({ command_line: { Ok: line } })).toBe(line);
    expect(commandLine({ command_line: { Ok: line } })).toEqual({ ok: true, text: line });
  });

  it('has nothing to copy when the flags cannot be written, and says why', () => {
    const why = "-ot pattern 'blk\\.{1,2}' contains ',' or '='";
    expect(copyText({ command_line: { Err: why } })).toBeNull();
    expect(commandLine({ command_line: { Err: why } })).toEqual({ ok: false, error: why });
  });

  it('labels the ceiling as an upper bound', () => {
    expect(ceilingText(10.86152857586596)).toBe('≤ 10.9 tok/s decode');
    expect(ceilingText(123.4)).toBe('≤ 123 tok/s decode');
    expect(ceilingText(null)).toBeNull();
    expect(ceilingText(0)).toBeNull();
  });
});

describe('layout from a plan', () => {
  it('puts every block in its column and knows the rig', () => {
    const r = sample();
    const layout = layoutFromPlan(r.report.plan, r.report.options, r.layers);
    expect(layout.layers).toEqual(['gpu-0', 'gpu-0', 'gpu-0', 'gpu-0', 'gpu-1', 'gpu-1', 'gpu-1', 'gpu-1']);
    expect(layout.experts).toEqual([null, 'gpu-0', 'gpu-0', 'cpu', 'gpu-1', 'gpu-1', 'cpu', 'cpu']);
    expect(layout.kv[5]).toBe('gpu-1');
    const ctx = contextFromResponse(r);
    expect(ctx.nLayer).toBe(8);
    expect(ctx.gpuCapacities).toEqual([24 * 2 ** 30, 24 * 2 ** 30]);
    expect([...ctx.expertLayers].sort()).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it('draws a layer moved by a per-layer -ot where its weights are, its KV at home', () => {
    const r = sample();
    const o = options({ tensor_split: [4, 5], overrides: [{ pattern: String.raw`blk\.6\.`, device: { kind: 'gpu', index: 0 } }] });
    const layout = layoutFromPlan(r.report.plan, o, r.layers);
    expect(layout.layers[6]).toBe('gpu-0');
    expect(layout.home[6]).toBe('gpu-1');
    expect(layout.kv[6]).toBe('gpu-1');
  });
});

describe('formatLayerRanges', () => {
  it('compresses runs', async () => {
    const { formatLayerRanges } = await import('./layout');
    expect(formatLayerRanges([8, 0, 1, 2, 5, 7])).toBe('0–2, 5, 7–8');
    expect(formatLayerRanges([])).toBe('');
  });
});

describe('commandWords', () => {
  it('splits at unquoted spaces and gives the line back exactly', async () => {
    const { commandWords } = await import('./response');
    const line = String.raw`llama-server -m '/m/My Models/glm.gguf' -ngl all -ot 'blk\.(3|4)\.ffn_.*_exps=CUDA0' -ot '\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU' -c 32768 -kvu`;
    const words = commandWords(line);
    expect(words.map((w) => w.text).join(' ')).toBe(line);
    expect(words[0]).toEqual({ text: 'llama-server', kind: 'program' });
    expect(words[2]).toEqual({ text: "'/m/My Models/glm.gguf'", kind: 'value' });
    expect(words.filter((w) => w.kind === 'override').map((w) => w.text)).toEqual([
      String.raw`'blk\.(3|4)\.ffn_.*_exps=CUDA0'`,
      String.raw`'\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU'`,
    ]);
    expect(words.at(-1)).toEqual({ text: '-kvu', kind: 'flag' });
  });
});

describe('commandGroups', () => {
  it('keeps each flag with its value', async () => {
    const { commandGroups, commandWords } = await import('./response');
    const line = "llama-server -m /m.gguf -ngl all -ot 'x=CPU' -kvu -nkvo";
    const groups = commandGroups(commandWords(line)).map((g) => g.map((w) => w.text).join(' '));
    expect(groups).toEqual(['llama-server', '-m /m.gguf', '-ngl all', "-ot 'x=CPU'", '-kvu', '-nkvo']);
    expect(groups.join(' ')).toBe(line);
  });
});
