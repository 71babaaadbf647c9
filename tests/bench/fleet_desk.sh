#!/usr/bin/env bash
# One desk over 8 rigs: 9 real `rigdeck serve` daemons on loopback, each with its own folders and
# its own NVML test-double rig (the fixtures in turn), the 8 rigs with fleet listeners, all paired
# with the desk by join codes. Then for BENCH_SECONDS seconds (60 by default) the desk's fleet overview
# is read once a second: the age of each rig's last telemetry frame on it (now minus the frame's
# own time: the rig's 1 Hz sampling plus the desk's watch) as median, p95 and max over every
# rig and read; the desk's CPU (its user + system seconds over the window, as % of one core) and
# its resident memory at the end. Prints one Markdown table.
#
# RIGDECK_BIN and RIGDECK_NVML_LIBRARY name the binaries (default: the release build in
# $CARGO_TARGET_DIR, else target/); RIGS (default 8) and BENCH_SECONDS can be changed.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
bin="${RIGDECK_BIN:-$target/release/rigdeck}"
nvml="${RIGDECK_NVML_LIBRARY:-$target/release/libnvml_double.so}"
rigs="${RIGS:-8}"
window="${BENCH_SECONDS:-60}"
for file in "$bin" "$nvml"; do
  [[ -x "$file" || -f "$file" ]] || {
    echo "$file is missing: build it first (cargo build --release -p rigdeck-server -p rigdeck-nvml-double)" >&2
    exit 1
  }
done

work="$(mktemp -d -t rigdeck-fleet-bench-XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

fixtures=(2x5060ti.json 4x3090.json 2xgh200.json 4xpro6000.json cpu-only.json 8gpu-bench.json)

# start NAME RIG FLEET_PORT(or "") -> sets api_port; the daemon's pid is appended to pids.
start() {
  local name="$1" rig="$2" fleet_port="$3" dir="$work/$1"
  mkdir -p "$dir/config/fleet"
  echo "$name" >"$dir/config/fleet/name"
  api_port="$(free_port)"
  local extra=()
  [[ -n "$fleet_port" ]] && extra=(--fleet-bind "127.0.0.1:$fleet_port")
  RIGDECK_CONFIG_DIR="$dir/config" RIGDECK_DATA_DIR="$dir/data" RIGDECK_CACHE_DIR="$dir/cache" \
    RIGDECK_NVML_LIBRARY="$nvml" RIGDECK_NVML_DOUBLE_RIG="$root/tests/fixtures/rigs/$rig" RUST_LOG=warn \
    "$bin" serve --bind "127.0.0.1:$api_port" "${extra[@]}" >"$dir/out.log" 2>&1 &
  pids+=("$!")
  echo "$api_port" >"$dir/port"
  for _ in $(seq 1 300); do
    [[ -s "$dir/config/token" ]] && curl -sf -o /dev/null -H "authorization: Bearer $(cat "$dir/config/token")" \
      "http://127.0.0.1:$api_port/api/v1/fleet" && return 0
    sleep 0.2
  done
  echo "$name did not start: $(tail -n 5 "$dir/out.log")" >&2
  exit 1
}

# call NAME METHOD PATH [BODY]: the JSON answer of that daemon's API.
call() {
  local dir="$work/$1"
  curl -sf -X "$2" -H "authorization: Bearer $(cat "$dir/config/token")" -H 'content-type: application/json' \
    ${4:+--data "$4"} "http://127.0.0.1:$(cat "$dir/port")$3"
}

start desk 4x3090.json ""
desk_pid="${pids[0]}"
for i in $(seq 1 "$rigs"); do
  start "rig$i" "${fixtures[$(((i - 1) % ${#fixtures[@]}))]}" "$(free_port)"
  code="$(call "rig$i" POST /api/v1/fleet/invites '{}' | python3 -c 'import json, sys; print(json.load(sys.stdin)["code"])')"
  call desk POST /api/v1/fleet/join "{\"code\": \"$code\"}" >/dev/null
done

# Every rig live on the overview before the window starts.
for _ in $(seq 1 100); do
  live="$(call desk GET /api/v1/fleet/overview | python3 -c 'import json, sys; print(sum(e["state"] == "live" and e["frame_age_ms"] is not None for e in json.load(sys.stdin)["entries"] if e["role"] == "rig"))')"
  [[ "$live" == "$rigs" ]] && break
  sleep 0.2
done
[[ "$live" == "$rigs" ]] || { echo "only $live of $rigs rigs are live on the overview" >&2; exit 1; }

ticks() { awk '{print $14 + $15}' "/proc/$desk_pid/stat"; }
hz="$(getconf CLK_TCK)"
cpu_start="$(ticks)"
t_start="$(date +%s.%N)"
: >"$work/ages"
for _ in $(seq 1 "$window"); do
  call desk GET /api/v1/fleet/overview |
    python3 -c 'import json, sys; [print(e["frame_age_ms"]) for e in json.load(sys.stdin)["entries"] if e["role"] == "rig" and e["state"] == "live"]' >>"$work/ages"
  sleep 1
done
cpu_end="$(ticks)"
t_end="$(date +%s.%N)"
rss_kib="$(awk '/^VmRSS/ {print $2}' "/proc/$desk_pid/status")"

python3 - "$work/ages" "$cpu_start" "$cpu_end" "$hz" "$t_start" "$t_end" "$rss_kib" "$rigs" "$window" <<'EOF'
import statistics, sys
ages_file, cpu0, cpu1, hz, t0, t1, rss, rigs, window = sys.argv[1:]
ages = sorted(int(line) for line in open(ages_file) if line.strip())
def pct(p):
    k = (len(ages) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(ages) - 1)
    return ages[lo] + (ages[hi] - ages[lo]) * (k - lo)
cpu = (int(cpu1) - int(cpu0)) / int(hz) / (float(t1) - float(t0)) * 100
print(f"| desk over {rigs} rigs, {window} s | value |")
print("|---|---|")
print(f"| telemetry age on the overview, median | {statistics.median(ages) / 1000:.2f} s |")
print(f"| telemetry age, p95 | {pct(0.95) / 1000:.2f} s |")
print(f"| telemetry age, max | {ages[-1] / 1000:.2f} s |")
print(f"| reads (rig × second) | {len(ages)} |")
print(f"| desk CPU | {cpu:.1f} % of one core |")
print(f"| desk RSS | {int(rss) / 1024:.0f} MiB |")
EOF
