import { describe, expect, it } from 'vitest';
import type { GangModelSurvey } from '../api/types';
import { fetchLabel, fetchableRigs, landsEverywhereAtPath } from './gangModel';

const fromHub = (missing: GangModelSurvey['missing']): GangModelSurvey => ({
  model: '/hf/models--o--n/snapshots/c',
  origin: { request: { repo: 'o/n', commit: 'c', label: 'all files' }, within: '' },
  missing,
});

const rig = (name: string, lands_at: string | null, same_path = true) => ({
  rig: name,
  lands_at,
  same_path,
  download_id: null,
  note: `'${name}' would download it`,
});

describe('gang model offer', () => {
  it('offers the download on every rig that answered, named in the button', () => {
    const survey = fromHub([rig('tower', '/hf/models--o--n/snapshots/c'), rig('mini', '/hf/models--o--n/snapshots/c')]);
    expect(fetchLabel(survey)).toBe('Download on tower, mini');
    expect(landsEverywhereAtPath(survey)).toBe(true);
  });

  it('leaves out a rig that could not be asked, and says when a rig lands elsewhere', () => {
    const survey = fromHub([rig('tower', null), rig('mini', '/home/u/hf/x', false)]);
    expect(fetchableRigs(survey)).toEqual(['mini']);
    expect(landsEverywhereAtPath(survey)).toBe(false);
  });

  it('offers no download for a model that did not come from the hub', () => {
    const survey: GangModelSurvey = { model: '/m', origin: null, missing: [rig('mini', null)] };
    expect(fetchLabel(survey)).toBeNull();
  });
});
