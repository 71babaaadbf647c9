// The "New tuning" form as data: the defaults make the daemon's default tuning, typed value lists
// parse (tensor_split's on ";", the empty value written ""), ranges count, the trial count follows
// walk and grid, and only what is plainly missing is caught, with the row to mark.

import { describe, expect, it } from 'vitest';
import {
  buildKnob,
  buildTune,
  defaultTuneDraft,
  knobName,
  newKnob,
  OTHER_FLAG,
  parseValues,
  rangeCount,
  trialsNeeded,
  trialsText,
  tunedName,
  valuesHint,
  withFirstProfile,
  withNewKnob,
  type KnobDraft,
  type TuneDraft,
} from './tuneDraft';

const knob = (extra: Partial<KnobDraft>): KnobDraft => ({ ...newKnob(), ...extra });
const draft = (extra: Partial<TuneDraft> = {}): TuneDraft => ({ ...defaultTuneDraft(), profile: 'qwen', knobs: [knob({ values: '2, 4, 8' })], ...extra });

function problem(d: TuneDraft): { field: string; message: string } {
  const r = buildTune(d);
  if (r.ok) throw new Error('expected a problem');
  return { field: r.field, message: r.message };
}

describe('parseValues', () => {
  it('splits on commas and trims', () => {
    expect(parseValues(' 2, 4 ,8,', 'threads')).toEqual(['2', '4', '8']);
    expect(parseValues('f16,q8_0', 'cache_type')).toEqual(['f16', 'q8_0']);
  });
  it('splits tensor_split on ";", its commas belonging to each value', () => {
    expect(parseValues('3,1; 1,1 ;1,3', 'tensor_split')).toEqual(['3,1', '1,1', '1,3']);
    expect(parseValues('3,1', 'tensor_split')).toEqual(['3,1']);
    expect(parseValues('8,6; 10,8', 'gpu_expert_layers')).toEqual(['8,6', '10,8']);
  });
  it('reads "" as the empty value (a flag alone) and drops other empty entries', () => {
    expect(parseValues('off, "", ,', '--no-mmap')).toEqual(['off', '']);
    expect(parseValues("''", '--flag')).toEqual(['']);
    expect(parseValues('  ', 'threads')).toEqual([]);
  });
});

describe('knobs', () => {
  it('take the flag typed for "other flag…"', () => {
    expect(knobName(knob({ name: 'ubatch' }))).toBe('ubatch');
    expect(knobName(knob({ name: OTHER_FLAG, flag: ' --draft-min ' }))).toBe('--draft-min');
  });
  it('explain their list separator in the hint', () => {
    expect(valuesHint(knob({ name: 'tensor_split' }))).toMatch(/";"/);
    expect(valuesHint(knob({ name: OTHER_FLAG, flag: '--x' }))).toMatch(/off leaves the flag out/);
    expect(valuesHint(knob({ name: 'threads' }))).toMatch(/commas/);
  });
  it('count a range the way the daemon spells it out', () => {
    expect(rangeCount(128, 512, 128)).toBe(4);
    expect(rangeCount(2, 9, 3)).toBe(3);
    expect(rangeCount(4, 4, 1)).toBe(1);
    expect(rangeCount(8, 4, 1)).toBe(0);
    expect(rangeCount(1, 4, 0)).toBe(0);
  });
  it('build to values or a range', () => {
    expect(buildKnob(knob({ name: 'ubatch', values: '64, 128' }), 0)).toEqual({ ok: true, value: { knob: { name: 'ubatch', values: ['64', '128'] }, count: 2 } });
    expect(buildKnob(knob({ name: 'ubatch', mode: 'range', from: 128, to: 512, step: 128 }), 0)).toEqual({
      ok: true,
      value: { knob: { name: 'ubatch', range: { from: 128, to: 512, step: 128 } }, count: 4 },
    });
  });
  it('name the row when plainly incomplete', () => {
    expect(buildKnob(knob({ values: ' , ' }), 1)).toMatchObject({ ok: false, field: 'knob1', message: expect.stringMatching(/^threads: give the values to try/) });
    expect(buildKnob(knob({ name: OTHER_FLAG, flag: '', values: '1' }), 0)).toMatchObject({ ok: false, field: 'knob0', message: expect.stringMatching(/type the engine flag/) });
    expect(buildKnob(knob({ mode: 'range', from: 1, to: null, step: 1 }), 2)).toMatchObject({ ok: false, field: 'knob2' });
  });
});

describe('the trial count', () => {
  it('is the baseline plus each value (walk) or each combination (grid)', () => {
    expect(trialsNeeded('walk', [3, 2])).toBe(6);
    expect(trialsNeeded('grid', [3, 2])).toBe(7);
    expect(trialsNeeded('grid', [])).toBe(1);
  });
  it('is said in words', () => {
    const knobs = [
      { name: 'threads', count: 3 },
      { name: 'ubatch', count: 2 },
    ];
    expect(trialsText('walk', knobs)).toBe('up to 6 trials: the profile as saved + 3 values of threads + 2 of ubatch');
    expect(trialsText('grid', knobs)).toBe('up to 7 trials: the profile as saved + 3 × 2 combinations');
    expect(trialsText('walk', [{ name: 'threads', count: 1 }])).toBe('up to 2 trials: the profile as saved + 1 value of threads');
  });
});

describe('buildTune', () => {
  it('makes the daemon’s default tuning of the knobs typed', () => {
    expect(buildTune(draft())).toEqual({
      ok: true,
      trials: 4,
      text: 'up to 4 trials: the profile as saved + 3 values of threads',
      body: {
        profile: 'qwen',
        spec: {
          knobs: [{ name: 'threads', values: ['2', '4', '8'] }],
          strategy: 'walk',
          objective: 'aggregate_tps',
          bench: { shapes: [{ prompt_tokens: 512, output_tokens: 128 }], depths: [0], concurrency: [1], warm_runs: 5, api: 'chat' },
          max_trials: 24,
        },
      },
    });
  });
  it('carries a name, grid, the objective and the workload point', () => {
    const r = buildTune(
      draft({
        name: ' ub ',
        knobs: [knob({ name: 'ubatch', values: '64, 128' }), knob({ name: 'tensor_split', values: '3,1; 1,1' })],
        strategy: 'grid',
        objective: 'ttft_ms',
        shape: '32 : 16',
        concurrency: 2,
        warmRuns: 3,
        api: 'completions',
      }),
    );
    expect(r).toMatchObject({ ok: true, trials: 5, text: 'up to 5 trials: the profile as saved + 2 × 2 combinations' });
    if (!r.ok) return;
    expect(r.body.name).toBe('ub');
    expect(r.body.spec).toEqual({
      knobs: [
        { name: 'ubatch', values: ['64', '128'] },
        { name: 'tensor_split', values: ['3,1', '1,1'] },
      ],
      strategy: 'grid',
      objective: 'ttft_ms',
      bench: { shapes: [{ prompt_tokens: 32, output_tokens: 16 }], depths: [0], concurrency: [2], warm_runs: 3, api: 'completions' },
      max_trials: 24,
    });
  });
  it('leaves the rest to the daemon: too many trials and too few warm runs are sent as typed', () => {
    const r = buildTune(draft({ warmRuns: 1, maxTrials: 2 }));
    expect(r).toMatchObject({ ok: true, trials: 4 });
  });
  it('catches what is plainly missing, with the field to mark', () => {
    expect(problem(draft({ profile: '' })).field).toBe('profile');
    expect(problem(draft({ knobs: [] })).field).toBe('knob0');
    expect(problem(draft({ knobs: [knob({ values: '2' }), knob({ name: 'ubatch', values: '' })] }))).toMatchObject({ field: 'knob1', message: expect.stringMatching(/^ubatch/) });
    expect(problem(draft({ shape: '512' }))).toMatchObject({ field: 'shape', message: expect.stringMatching(/PROMPT:OUTPUT/) });
    expect(problem(draft({ concurrency: null })).field).toBe('concurrency');
    expect(problem(draft({ warmRuns: Number.NaN })).field).toBe('warmRuns');
    expect(problem(draft({ maxTrials: null })).field).toBe('maxTrials');
  });
});

describe('another knob row', () => {
  it('offers the first knob not tuned yet', () => {
    const d = withNewKnob(withNewKnob(defaultTuneDraft()));
    expect(d.knobs.map((k) => k.name)).toEqual(['threads', 'batch', 'ubatch']);
    expect(d.knobs[2]).toEqual(newKnob('ubatch'));
  });
});

describe('the form’s first choices', () => {
  it('pick the first profile once, and keep a pick', () => {
    expect(withFirstProfile(defaultTuneDraft(), ['a', 'b']).profile).toBe('a');
    expect(withFirstProfile({ ...defaultTuneDraft(), profile: 'b' }, ['a', 'b']).profile).toBe('b');
    expect(withFirstProfile(defaultTuneDraft(), []).profile).toBe('');
  });
  it('propose "<profile>-tuned" for the saved profile', () => {
    expect(tunedName('qwen')).toBe('qwen-tuned');
  });
});

describe('the quality floor', () => {
  it('is left out unless a reference is picked', () => {
    const r = buildTune(draft({ floorMax: 0.01, floorMode: 'bound' }));
    expect(r.ok && 'quality_floor' in r.body.spec).toBe(false);
  });
  it('sends a bound, or none for "no worse than as saved"', () => {
    const bound = buildTune(draft({ floorReference: 'ref-1', floorMode: 'bound', floorMax: 0.01 }));
    expect(bound.ok && bound.body.spec.quality_floor).toEqual({ reference: 'ref-1', max_mean_kld: 0.01 });
    const base = buildTune(draft({ floorReference: 'ref-1', floorMode: 'base', floorMax: 0.01 }));
    expect(base.ok && base.body.spec.quality_floor).toEqual({ reference: 'ref-1', max_mean_kld: null });
  });
  it('asks for a bound above 0 when one is chosen', () => {
    for (const floorMax of [null, 0, -1, Number.NaN]) {
      expect(problem(draft({ floorReference: 'ref-1', floorMode: 'bound', floorMax }))).toMatchObject({ field: 'floorMax', message: expect.stringMatching(/0\.01/) });
    }
  });
});
