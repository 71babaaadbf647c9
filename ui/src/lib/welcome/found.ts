// What the first-run page says it found on this machine: each GPU with its memory and PCIe link
// (current against maximum, so an x1 riser shows), or that models run on the CPU; the engines
// ready or building; and whether the page is the one to open on.

import type { EngineBuild, LaunchProfile, RigSample } from '../api/types';
import type { BuildState } from '../engines/instances';
import { formatBytes } from '../format/units';

export interface FoundGpu {
  index: number;
  name: string;
  memory: string;
  /** "PCIe 4.0 x16", with the maximum when the link runs below it. */
  link: string | null;
  degraded: boolean;
}

export function foundGpus(sample: RigSample | null): FoundGpu[] {
  if (!sample) return [];
  return sample.gpus.gpus
    .filter((g) => g.lost == null)
    .map((g) => {
      const p = g.pcie;
      const now = p.gen_current != null && p.width_current != null ? `PCIe ${p.gen_current}.0 x${p.width_current}` : null;
      const degraded = (p.width_current != null && p.width_max != null && p.width_current < p.width_max)
        || (p.gen_current != null && p.gen_max != null && p.gen_current < p.gen_max);
      const max = degraded && p.gen_max != null && p.width_max != null ? ` (of ${p.gen_max}.0 x${p.width_max})` : '';
      return {
        index: g.index,
        name: g.name ?? 'NVIDIA GPU',
        memory: g.memory ? formatBytes(g.memory.total_bytes) : 'memory unknown',
        link: now ? now + max : null,
        degraded,
      };
    });
}

/** The host in one line: RAM and cores. */
export function hostLine(sample: RigSample | null): string | null {
  if (!sample) return null;
  const h = sample.host;
  const cores = h.cpu.physical_cores ?? h.cpu.logical_cores;
  const cpu = h.cpu.model ? `${h.cpu.model}, ` : '';
  return `${cpu}${cores} cores · ${formatBytes(h.memory.total_bytes)} RAM (${formatBytes(h.memory.available_bytes)} free)`;
}

/** The llama.cpp builds that can run a model, newest first, in words. */
export function readyEngines(builds: EngineBuild[] | null): string[] {
  return (builds ?? [])
    .filter((b) => b.kind === 'llama.cpp' && b.status !== 'missing')
    .sort((a, b) => b.created_at_ms - a.created_at_ms)
    .map((b) => `llama.cpp ${b.version} · ${b.backend === 'cuda' ? `CUDA${b.cuda_architectures ? ` (sm ${b.cuda_architectures})` : ''}` : b.backend.toUpperCase()}`);
}

/** Whether the rig has GPUs but no CUDA build of llama.cpp to use them (models then run on the
 *  CPU, which a newcomer should hear before the first Run). */
export function gpusWithoutCudaBuild(gpus: FoundGpu[], builds: EngineBuild[] | null): boolean {
  const cuda = (builds ?? []).some((b) => b.kind === 'llama.cpp' && b.backend === 'cuda' && b.status !== 'missing');
  return gpus.length > 0 && builds != null && !cuda;
}

/** A build under way, in words with its progress; null when none runs. */
export function buildUnderWay(build: BuildState): string | null {
  if (build.buildId == null || build.done || build.failed) return null;
  const pct = build.fraction != null ? ` ${Math.round(build.fraction * 100)} %` : '';
  return `building llama.cpp: ${build.step ?? 'starting'}${pct}`;
}

/** Whether the app opens on the first-run page: no launch profile yet, and not skipped. */
export function opensOnWelcome(profiles: LaunchProfile[] | null, skipped: boolean | null): boolean {
  return profiles != null && profiles.length === 0 && skipped === false;
}
