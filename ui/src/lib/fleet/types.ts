// The desk's fleet overview (GET /api/v1/fleet/overview), as the daemon gives it.

export interface FleetGpu {
  index: number | null;
  name: string | null;
  vram_used_bytes: number | null;
  vram_total_bytes: number | null;
  temperature_c: number | null;
  utilization_pct: number | null;
  power_w: number | null;
  lost: string | null;
}

export interface FleetFinding {
  severity: string;
  title: string;
  subject: string;
}

export interface FleetInstance {
  name: string;
  model: string | null;
  state: string;
}

export interface FleetDownload {
  label: string;
  state: string;
  done_bytes: number;
  total_bytes: number;
}

export interface FleetEntry {
  name: string;
  role: 'desk' | 'rig';
  address: string | null;
  state: 'live' | 'unreachable';
  why: string | null;
  reason: string | null;
  since_ms: number;
  stale: boolean;
  taken_at_ms: number | null;
  frame_at_ms: number | null;
  frame_age_ms: number | null;
  gpus: FleetGpu[];
  findings: FleetFinding[];
  instances: FleetInstance[];
  downloads: FleetDownload[];
}

export interface FleetOverview {
  now_ms: number;
  desk: string;
  /** Paired peers (rigs and desks), as stored. */
  paired: number;
  entries: FleetEntry[];
}
