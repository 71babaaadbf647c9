// The tuning API (/api/v1/bench/tunes): start a tuning of a profile's knobs, list and read
// tunings, cancel, delete, save the best values as a new profile. Progress comes as `bench.tune`
// events on the event stream (each trial's benchmark as `bench.run`), not through here.

import { request } from '../api/client';
import type { SavedProfile } from '../api/types';
import type { NewTune, TuneView } from './types';

const TUNES = '/api/v1/bench/tunes';

export const tuneApi = {
  /** 201; 400 `invalid_tuning` names the knob or field and the fix; 409 `busy` while another runs. */
  start: (body: NewTune) => request<TuneView>('POST', TUNES, body),
  /** Newest first. */
  list: (signal?: AbortSignal) => request<TuneView[]>('GET', TUNES, undefined, signal),
  get: (id: number, signal?: AbortSignal) => request<TuneView>('GET', `${TUNES}/${id}`, undefined, signal),
  /** 409 `not_running` when it already ended. The trials measured are kept. */
  cancel: (id: number) => request<TuneView>('POST', `${TUNES}/${id}/cancel`, {}),
  /** 204; 409 `running` while it runs (cancel it first). */
  remove: (id: number) => request<void>('DELETE', `${TUNES}/${id}`),
  /** 201 with the new profile; 400 `invalid_tuning` when no trial beat the baseline beyond the
   *  noise, and the profile-name errors of any new profile. */
  save: (id: number, name: string) => request<SavedProfile>('POST', `${TUNES}/${id}/save`, { name }),
};
