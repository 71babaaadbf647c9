// What a benchmark can be pointed at: the ready instances (GET /instances), the launch profiles
// (GET /profiles, started for the run) and the gateway's model names (each profile's name and
// aliases); and a new form's first choices among them.

import type { InstanceView, LaunchProfile } from '../api/types';
import type { BenchDraft } from './draft';

export interface TargetOptions {
  instances: string[];
  profiles: string[];
  gatewayModels: string[];
}

export function targetOptions(instances: readonly InstanceView[] | null, profiles: readonly LaunchProfile[] | null): TargetOptions {
  const names = (profiles ?? []).map((p) => p.name);
  const aliases = (profiles ?? []).flatMap((p) => p.gateway?.aliases ?? []);
  return {
    instances: (instances ?? []).filter((i) => i.phase === 'ready').map((i) => i.name).sort(),
    profiles: [...names].sort(),
    gatewayModels: [...new Set([...names, ...aliases])].sort(),
  };
}

/** The draft with each empty pick set to the first option; picks already made are kept. With
 *  `pickKind` (a new form), a profile is the kind when no instance is ready. */
export function withFirstTargets(d: BenchDraft, o: TargetOptions, pickKind = false): BenchDraft {
  const next = { ...d };
  if (!next.instance && o.instances[0]) next.instance = o.instances[0];
  if (!next.profile && o.profiles[0]) next.profile = o.profiles[0];
  if (!next.gatewayModel && o.gatewayModels[0]) next.gatewayModel = o.gatewayModels[0];
  if (pickKind && next.targetKind === 'instance' && !next.instance && next.profile) next.targetKind = 'profile';
  return next;
}
