// The engines state for the app: installed builds, launch profiles, instances (kept current by
// `instance.state` events), each instance's log tail (`instance.log`) and the bundled build's
// progress (`engine.build`). One instance for the app, fed by the live event stream.

import { api, ApiError } from '../api/client';
import type { BuildProgress, EngineBuild, EnginesAtStart, InstanceView, LaunchProfile, LogLine } from '../api/types';
import { emptyBuild, mergeLogs, reduceBuild, type BuildState } from './instances';

import { problemOf, type Problem } from '../api/problem';

// The components import these from here too.
export { problemOf, type Problem };

class EnginesState {
  builds = $state.raw<EngineBuild[] | null>(null);
  profiles = $state.raw<LaunchProfile[] | null>(null);
  instances = $state.raw<InstanceView[]>([]);
  /** When each instance's view arrived (uptime advances from there). */
  receivedAt = $state.raw<Record<string, number>>({});
  logs = $state.raw<Record<string, LogLine[]>>({});
  build = $state.raw<BuildState>(emptyBuild());
  error = $state.raw<Problem | null>(null);
  /** What the daemon did about engines as it started (from its status). */
  atStart = $state.raw<EnginesAtStart | null>(null);
  private onUnauthorized: () => void = () => {};

  setUnauthorizedHandler(fn: () => void): void {
    this.onUnauthorized = fn;
  }

  private fail(e: unknown): void {
    if (e instanceof ApiError && e.unauthorized) this.onUnauthorized();
    else this.error = problemOf(e);
  }

  async refresh(): Promise<void> {
    try {
      const [builds, profiles, instances, status] = await Promise.all([
        api.engines(),
        api.profiles(),
        api.instances(),
        api.status(),
      ]);
      this.builds = builds;
      this.profiles = profiles;
      this.setInstances(instances);
      this.atStart = status.engines_at_start ?? null;
      this.error = null;
    } catch (e) {
      this.fail(e);
    }
  }

  async refreshBuilds(): Promise<void> {
    try {
      this.builds = await api.engines();
    } catch (e) {
      this.fail(e);
    }
  }

  async refreshProfiles(): Promise<void> {
    try {
      this.profiles = await api.profiles();
    } catch (e) {
      this.fail(e);
    }
  }

  setInstances(list: InstanceView[]): void {
    const now = Date.now();
    this.instances = list;
    this.receivedAt = Object.fromEntries(list.map((v) => [v.name, now]));
  }

  /** An `instance.state` event or an action's answer: replaces (or adds) that instance. */
  upsert(v: InstanceView): void {
    const i = this.instances.findIndex((x) => x.name === v.name);
    this.instances = i >= 0 ? this.instances.map((x, j) => (j === i ? v : x)) : [...this.instances, v];
    this.receivedAt = { ...this.receivedAt, [v.name]: Date.now() };
  }

  ingestLog(l: LogLine): void {
    const name = l.name ?? '';
    const have = this.logs[name] ?? [];
    const next = mergeLogs(have, [l]);
    if (next !== have) this.logs = { ...this.logs, [name]: next };
  }

  /** A fetched tail: joined with lines that events brought meanwhile. */
  setLogs(name: string, lines: LogLine[]): void {
    const bySeq = new Map<number, LogLine>();
    for (const l of [...lines, ...(this.logs[name] ?? [])]) bySeq.set(l.seq, l);
    this.logs = { ...this.logs, [name]: mergeLogs([], [...bySeq.values()]) };
  }

  /** After dropped events: instances, profiles and builds again, and the log tail of every
   *  instance whose log is held. */
  async resync(): Promise<void> {
    await this.refresh();
    await Promise.all(
      Object.keys(this.logs).map((name) =>
        api.instanceLogs(name, { tail: 200 }).then(
          (lines) => this.setLogs(name, lines),
          (e) => this.fail(e),
        ),
      ),
    );
  }

  ingestBuild(e: BuildProgress): void {
    this.build = reduceBuild(this.build, e);
    if (e.step === 'done') void this.refreshBuilds();
  }
}

export const engines = new EnginesState();
