// The placement editor's state: which model on which rig, the options being edited, the daemon's
// latest plan for them, the blocks the user selected, and a pasted command line. Every change asks
// the daemon again (debounced, stale requests aborted); moves are translated by moves.ts.

import { api, ApiError } from '../api/client';
import type { AlsoBox, LinkOption, Margins, PlacementOptions, PlanRequest, PlanResponse, ParseRequest, RigPreset } from '../api/types';
import { newBox, rigRequest } from './boxes';
import { LatestRequest } from './latest';
import { applyMovesToLayout, contextFromResponse, layoutFromPlan, parseBlockId, type Move, type PlacedLayout } from './layout';
import { applyMoves } from './moves';
import { parsePlanResponse } from './response';
import type { DeviceKey } from './devices';
import type { PlanOpening } from '../routing/hash';

export const DEFAULT_MARGINS: Margins = {
  gpu_reserve_bytes: 512 * 1024 ** 2,
  gpu_overhead_bytes: 400 * 1024 ** 2,
  ram_reserve_bytes: 8 * 1024 ** 3,
  cpu_bandwidth_bytes_per_s: null,
};

/** llama-server's defaults (options.rs), with a context a long chat or an agent actually needs. */
export function defaultOptions(): PlacementOptions {
  return {
    n_gpu_layers: null,
    tensor_split: [],
    split_mode: 'layer',
    main_gpu: 0,
    overrides: [],
    context: 32768,
    parallel: 1,
    kv_unified: true,
    cache_type_k: 'f16',
    cache_type_v: 'f16',
    flash_attention: true,
    batch: 2048,
    ubatch: 512,
    kv_offload: true,
    op_offload: true,
    threads: null,
  };
}

export interface ApiProblem {
  code: string;
  message: string;
}

function problemOf(e: unknown): ApiProblem {
  if (e instanceof ApiError) return { code: e.code, message: e.message };
  return { code: 'error', message: e instanceof Error ? e.message : String(e) };
}

type Req = { kind: 'plan'; body: PlanRequest } | { kind: 'parse'; body: ParseRequest };

export class PlacementEditor {
  model = $state<string>('');
  rig = $state<string>('live');
  options = $state.raw<PlacementOptions>(defaultOptions());
  margins = $state.raw<Margins>(DEFAULT_MARGINS);
  response = $state.raw<PlanResponse | null>(null);
  /** The layout of `response`, or what the user just did while the daemon is asked. */
  layout = $state.raw<PlacedLayout | null>(null);
  busy = $state(false);
  /** The plan request's error, verbatim from the daemon. */
  error = $state.raw<ApiProblem | null>(null);
  /** The paste box's error (a bad flag, a regex that does not compile), verbatim. */
  pasteError = $state.raw<ApiProblem | null>(null);
  /** The answer to the last pasted command, while it is what the columns show. */
  pasted = $state.raw<PlanResponse | null>(null);
  selected = $state.raw<ReadonlySet<string>>(new Set());
  presets = $state.raw<RigPreset[]>([]);
  /** Other boxes lending devices to the rig being planned, each with its link. */
  also = $state.raw<AlsoBox[]>([]);
  /** The links a box can be on, with the planner's figures. */
  links = $state.raw<LinkOption[]>([]);
  /** Set when the last answer came from the automatic placer. */
  fromAuto = $state(false);

  private onUnauthorized: () => void;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly runner: LatestRequest<Req, PlanResponse>;

  constructor(onUnauthorized: () => void = () => {}) {
    this.onUnauthorized = onUnauthorized;
    this.runner = new LatestRequest<Req, PlanResponse>({
      fetch: (req, signal) => (req.kind === 'plan' ? api.plan(req.body, signal) : api.parsePlan(req.body, signal)),
      onResult: (res, req) => this.accept(res, req),
      onError: (e, req) => this.fail(e, req),
      onBusy: (b) => (this.busy = b),
    });
  }

  /** Opens the editor on a model (and rig), keeping the options when only the rig changes. With
   *  `opening.auto` (a fit verdict's Plan) it opens that verdict's plan: the automatic placement
   *  from llama-server's defaults and the default margins, at the verdict's context. */
  open(model: string, rig: string, opening: PlanOpening = { auto: false, context: null }): void {
    const sameModel = model === this.model;
    if (sameModel && this.response && !opening.auto) {
      this.setRig(rig);
      return;
    }
    this.model = model;
    this.rig = rig;
    if (!sameModel || opening.auto) {
      this.options = defaultOptions();
      this.response = null;
      this.layout = null;
      this.pasted = null;
      this.selected = new Set();
    }
    if (opening.auto) this.margins = DEFAULT_MARGINS;
    if (opening.context) this.options = { ...this.options, context: opening.context };
    this.error = null;
    void this.loadPresets();
    if (opening.auto) void this.auto();
    else this.request(true);
  }

  dispose(): void {
    this.runner.cancel();
    if (this.retryTimer) clearTimeout(this.retryTimer);
  }

  private async loadPresets(): Promise<void> {
    if (this.presets.length > 0) return;
    try {
      const [presets, links] = await Promise.all([api.rigs(), api.rigLinks()]);
      this.presets = presets;
      this.links = links;
    } catch (e) {
      if (e instanceof ApiError && e.unauthorized) this.onUnauthorized();
    }
  }

  private body(auto = false): PlanRequest {
    const b: PlanRequest = { model: this.model, rig: rigRequest(this.rig, this.also), options: this.options, margins: this.margins };
    if (auto) b.auto = true;
    return b;
  }

  /** Asks for a plan of the current options: debounced, or at once. */
  request(now = false): void {
    if (!this.model) return;
    const req: Req = { kind: 'plan', body: this.body() };
    if (now) void this.runner.run(req);
    else this.runner.schedule(req);
  }

  setOptions(patch: Partial<PlacementOptions>): void {
    this.options = { ...this.options, ...patch };
    this.request();
  }

  setMargins(patch: Partial<Margins>): void {
    this.margins = { ...this.margins, ...patch };
    this.request();
  }

  setRig(rig: string): void {
    if (rig === this.rig) return;
    this.rig = rig;
    this.resetPlacement();
  }

  /** Another rig has other cards: the placement flags of this one may not even apply there. */
  private resetPlacement(): void {
    this.options = { ...this.options, tensor_split: [], overrides: [], n_gpu_layers: null, split_mode: 'layer', main_gpu: 0, rpc_servers: [], devices: [] };
    this.selected = new Set();
    this.request(true);
  }

  /** "+ another box": a box lending its devices over a link. */
  addBox(): void {
    const box = newBox(
      this.presets.map((p) => p.id),
      this.links,
    );
    if (!box) return;
    this.setAlso([...this.also, box]);
  }

  /** Changes box `i` (its preset or its link), or removes it with `null`. */
  setBox(i: number, box: AlsoBox | null): void {
    const next = [...this.also];
    if (box) next[i] = box;
    else next.splice(i, 1);
    this.setAlso(next);
  }

  private setAlso(also: AlsoBox[]): void {
    this.also = also;
    this.resetPlacement();
  }

  /** The automatic placer, from the current context, cache types, slots and batches. */
  auto(): Promise<void> {
    this.selected = new Set();
    return this.runner.run({ kind: 'plan', body: this.body(true) });
  }

  /** Reads a pasted llama-server command line and draws it. */
  paste(command: string): Promise<void> {
    this.pasteError = null;
    this.selected = new Set();
    return this.runner.run({ kind: 'parse', body: { command, rig: rigRequest(this.rig, this.also), margins: this.margins } });
  }

  // ---- Selection and moves ----

  toggle(id: string, additive: boolean): void {
    const next = new Set(additive ? this.selected : []);
    if (this.selected.has(id) && (additive || this.selected.size === 1)) next.delete(id);
    else next.add(id);
    this.selected = next;
  }

  selectOnly(ids: string[]): void {
    this.selected = new Set(ids);
  }

  clearSelection(): void {
    this.selected = new Set();
  }

  /** Moves blocks (ids like `L12`, `E12`) to a device; the daemon is asked for the new plan. */
  move(ids: Iterable<string>, to: DeviceKey): void {
    const r = this.response;
    const layout = this.layout;
    if (!r || !layout) return;
    const moves: Move[] = [];
    for (const id of ids) {
      const b = parseBlockId(id);
      if (b) moves.push({ ...b, to });
    }
    if (moves.length === 0) return;
    const ctx = contextFromResponse(r);
    const next = applyMoves(this.options, ctx, layout, moves);
    this.selected = new Set();
    if (next === this.options) return;
    this.options = next;
    this.layout = applyMovesToLayout(layout, moves);
    this.fromAuto = false;
    this.request();
  }

  moveSelected(to: DeviceKey): void {
    this.move(this.selected, to);
  }

  // ---- Answers ----

  private accept(raw: PlanResponse, req: Req): void {
    const parsed = parsePlanResponse(raw);
    if (!parsed.ok) {
      this.error = { code: 'bad_answer', message: `The daemon’s plan could not be read: ${parsed.error}.` };
      return;
    }
    const res = parsed.response;
    this.error = null;
    this.response = res;
    this.options = res.report.options;
    this.layout = layoutFromPlan(res.report.plan, res.report.options, res.layers);
    if (req.kind === 'parse') {
      this.pasted = res;
      this.pasteError = null;
      this.fromAuto = false;
      if (res.parsed?.model && res.parsed.model !== this.model) this.model = res.parsed.model;
    } else {
      this.pasted = null;
      this.fromAuto = req.body.auto === true;
    }
  }

  private fail(e: unknown, req: Req): void {
    if (e instanceof ApiError && e.unauthorized) {
      this.onUnauthorized();
      return;
    }
    const p = problemOf(e);
    if (req.kind === 'parse') {
      this.pasteError = p;
      return;
    }
    this.error = p;
    // The live rig has no reading in the first second after start: ask again shortly.
    if (p.code === 'no_sample_yet') {
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.retryTimer = setTimeout(() => (req.body.auto ? void this.auto() : this.request(true)), 1000);
    }
  }
}

let shared: PlacementEditor | null = null;

/** One editor for the app, so edits survive a visit to another page and back. */
export function sharedEditor(onUnauthorized: () => void): PlacementEditor {
  shared ??= new PlacementEditor(onUnauthorized);
  return shared;
}
