// A gang's model on the followers' rigs that lack it: what the refusal offers (a download of
// the head's copy on those rigs, or copying it) and how its button reads.
import type { GangModelSurvey } from '../api/types';

/** The rigs a download can be started on: the model came from the hub and each rig answered. */
export function fetchableRigs(survey: GangModelSurvey): string[] {
  if (!survey.origin) return [];
  return survey.missing.filter((m) => m.lands_at != null).map((m) => m.rig);
}

/** "Download on tower, mini"; null when there is nothing to download. */
export function fetchLabel(survey: GangModelSurvey): string | null {
  const rigs = fetchableRigs(survey);
  return rigs.length ? `Download on ${rigs.join(', ')}` : null;
}

/** Whether every started download lands at the profile's own path (else the notes say the fix). */
export function landsEverywhereAtPath(survey: GangModelSurvey): boolean {
  return survey.missing.every((m) => m.lands_at == null || m.same_path);
}
