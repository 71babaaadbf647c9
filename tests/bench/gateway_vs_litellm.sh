#!/usr/bin/env bash
# Rigdeck's gateway side by side with LiteLLM's proxy (from the Python package index), both in
# front of one fake llama-server with fixed timings (crates/gateway/examples/fake_engine.rs) that
# Rigdeck itself launches from a profile. For 1, 16 and 64 concurrent streams, stream_load
# (crates/gateway/examples/stream_load.rs) streams chat completions three ways: straight to the
# engine, through the gateway, through LiteLLM. Every chunk carries the engine's emit time, so
# the latency each proxy adds per chunk is measured exactly on this host's clock. Prints one
# Markdown table: added chunk latency (median, p99), added time to first token, throughput and
# its ratio to direct, the proxy's CPU seconds and peak RSS during its legs.
# Targets (issue 14): p99 added latency under 1 ms per chunk, >= 98 % of direct throughput at 64.
#
#   bash tests/bench/gateway_vs_litellm.sh                 # or: make bench-gateway
#   STREAMS="1 16" REQUESTS=2 TOKENS=100 bash tests/bench/gateway_vs_litellm.sh
#   NO_BUILD=1 bash tests/bench/gateway_vs_litellm.sh   # with the release binaries already built
set -euo pipefail

STREAMS=${STREAMS:-1 16 64}
REQUESTS=${REQUESTS:-3}    # timed requests per stream, after one untimed warm-up request each
TOKENS=${TOKENS:-200}      # tokens per answer
TTFT_MS=${TTFT_MS:-50}
ITL_MS=${ITL_MS:-10}
# The newest patch releases (1.105.7, 1.106.10, 1.108.11, 1.109.1 checked) need certifi >=
# 2026.10.19, newer than the package index has; 1.106.0 installs.
LITELLM_VERSION=${LITELLM_VERSION:-1.106.0}
CACHE=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
RELEASE=$CARGO_TARGET_DIR/release
RIGDECK=$RELEASE/rigdeck

if [ -z "${NO_BUILD:-}" ]; then # NO_BUILD=1: use the release binaries already built
  cargo build -q --release -p rigdeck-server
  cargo build -q --release -p rigdeck-gateway --example fake_engine --example stream_load
fi
VENV=$CACHE/bench/litellm-$LITELLM_VERSION
if [ ! -x "$VENV/bin/litellm" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION"
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/rigdeck-gateway-bench.XXXXXX")
DAEMON_PID= LITELLM_PID=
cleanup() {
  # The daemon stops the engines it started when it gets SIGTERM.
  for pid in $LITELLM_PID $DAEMON_PID; do kill "$pid" 2>/dev/null || true; done
  for pid in $LITELLM_PID $DAEMON_PID; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_for URL SECONDS LOG [CURL ARGS]: until URL answers 2xx; prints LOG's tail if it never does.
wait_for() {
  for _ in $(seq $(($2 * 5))); do
    curl -sf -o /dev/null "${@:4}" "$1" && return 0
    sleep 0.2
  done
  echo "no answer from $1 within $2 s; its log:" >&2
  tail -n 30 "$3" >&2
  return 1
}

# A throwaway Rigdeck: its own config, data and cache folders, an empty model folder (nothing
# to scan), no GPUs needed (the fake engine registers as a CPU build, which plans no VRAM).
export RIGDECK_CONFIG_DIR=$WORK/config RIGDECK_DATA_DIR=$WORK/data RIGDECK_CACHE_DIR=$WORK/cache
export XDG_CONFIG_HOME=$WORK/xdg/config XDG_DATA_HOME=$WORK/xdg/data
mkdir -p "$RIGDECK_CONFIG_DIR" "$RIGDECK_DATA_DIR" "$WORK/models" "$WORK/results"
printf 'model_folders = ["%s"]\n' "$WORK/models" >"$RIGDECK_CONFIG_DIR/settings.toml"
# The profile needs a model file; the fake engine never reads it (kept out of the model folder).
printf 'GGUF' >"$WORK/fake.gguf"

"$RIGDECK" engines register "$RELEASE/examples/fake_engine" --backend cpu >"$WORK/register.log"
ENGINE_ID=$("$RIGDECK" engines list --json | jq -r --arg loc "$RELEASE/examples/fake_engine" \
  '[.[] | select(.location == $loc)][0].id')

DAEMON_PORT=$(free_port)
export RIGDECK_URL=http://127.0.0.1:$DAEMON_PORT
"$RIGDECK" serve --bind "127.0.0.1:$DAEMON_PORT" >"$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 150); do [ -s "$RIGDECK_CONFIG_DIR/token" ] && break; sleep 0.2; done
wait_for "$RIGDECK_URL/api/v1/status" 30 "$WORK/daemon.log" \
  -H "Authorization: Bearer $(cat "$RIGDECK_CONFIG_DIR/token" 2>/dev/null)"

"$RIGDECK" profiles create fake --engine "$ENGINE_ID" --model "$WORK/fake.gguf" --np 64 --no-restart \
  --env "FAKE_ENGINE_TTFT_MS=$TTFT_MS" --env "FAKE_ENGINE_ITL_MS=$ITL_MS" \
  --env "FAKE_ENGINE_TOKENS=$TOKENS" >"$WORK/profile.log"
"$RIGDECK" run fake >"$WORK/run.log"
ENGINE_PORT=$("$RIGDECK" ps --json | jq -r '.[] | select(.name == "fake") | .port')
DIRECT=http://127.0.0.1:$ENGINE_PORT/v1/chat/completions

# The gateway leg runs when this Rigdeck serves /v1 with API keys (issue 14's work): a key from
# `rigdeck keys create`, else from the keys API, else the leg is left out.
GATEWAY= GATEWAY_KEY=
if "$RIGDECK" keys --help >/dev/null 2>&1; then
  GATEWAY_KEY=$("$RIGDECK" keys create bench --json | jq -r '.secret // empty')
else
  GATEWAY_KEY=$(curl -sf -X POST "$RIGDECK_URL/api/v1/keys" -H 'content-type: application/json' \
    -H "Authorization: Bearer $(cat "$RIGDECK_CONFIG_DIR/token")" -d '{"name": "bench"}' |
    jq -r '.secret // empty' || true)
fi
if [ -n "$GATEWAY_KEY" ] &&
  curl -sf -o /dev/null -H "Authorization: Bearer $GATEWAY_KEY" "$RIGDECK_URL/v1/models"; then
  GATEWAY=$RIGDECK_URL/v1/chat/completions
fi

# LiteLLM's proxy, configured for the same engine. It refuses to start without a master key.
LITELLM_PORT=$(free_port)
LITELLM_KEY=sk-bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
cat >"$WORK/litellm.yaml" <<EOF
model_list:
  - model_name: fake
    litellm_params:
      model: openai/fake
      api_base: http://127.0.0.1:$ENGINE_PORT/v1
      api_key: none
EOF
# A local cost map: LiteLLM otherwise fetches one from the internet at start.
LITELLM_MASTER_KEY=$LITELLM_KEY LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR \
  "$VENV/bin/litellm" --config "$WORK/litellm.yaml" --host 127.0.0.1 --port "$LITELLM_PORT" \
  >"$WORK/litellm.log" 2>&1 &
LITELLM_PID=$!
wait_for "http://127.0.0.1:$LITELLM_PORT/health/liveliness" 120 "$WORK/litellm.log"

# The process and its descendants (uvicorn workers, if any).
tree() {
  local root=$1 child
  echo "$root"
  for child in $(pgrep -P "$root" || true); do tree "$child"; done
}
TICKS=$(getconf CLK_TCK)
cpu_ticks() { # pids → utime+stime summed, in ticks
  local total=0 p utime stime
  for p in "$@"; do
    # Fields after the ") " that closes the command name: utime and stime are 12th and 13th.
    read -r utime stime < <(sed 's/.*) //' "/proc/$p/stat" | awk '{ print $12, $13 }') || continue
    total=$((total + utime + stime))
  done
  echo "$total"
}
status_kib() { # field (VmRSS, VmHWM), pids → summed, in KiB
  local field=$1 total=0 p
  shift
  for p in "$@"; do
    total=$((total + $(awk -v f="$field:" '$1 == f { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
# Restarts VmHWM at the current RSS (writing 5 to clear_refs), so the peak is this leg's.
reset_peak() {
  local p
  for p in "$@"; do echo 5 >"/proc/$p/clear_refs" 2>/dev/null || true; done
}

# leg NAME STREAMS URL KEY [PIDS…]: one stream_load run, its figures in $WORK/results; the CPU
# and memory of PIDS (the proxy) are sampled around it.
leg() {
  local name=$1 n=$2 url=$3 key=$4 out=$WORK/results/$2-$1
  shift 4
  # Warm-up in its own run (one request per stream: connections, a proxy's lazy imports), so
  # the CPU sampled below is the timed run's alone.
  "$RELEASE/examples/stream_load" --url "$url" --model fake ${key:+--key "$key"} --streams "$n" \
    --requests-per-stream 1 --warmup-requests 0 --max-tokens "$TOKENS" >/dev/null || true
  local before=0 after
  if [ $# -gt 0 ]; then
    reset_peak "$@"
    before=$(cpu_ticks "$@")
  fi
  "$RELEASE/examples/stream_load" --label "$name" --url "$url" --model fake ${key:+--key "$key"} \
    --streams "$n" --requests-per-stream "$REQUESTS" --warmup-requests 0 --max-tokens "$TOKENS" \
    --json "$out.json" || true
  if [ $# -gt 0 ]; then
    after=$(cpu_ticks "$@")
    awk -v t="$TICKS" -v a="$after" -v b="$before" -v rss="$(status_kib VmRSS "$@")" \
      -v hwm="$(status_kib VmHWM "$@")" 'BEGIN {
        printf "{\"cpu_s\": %.2f, \"rss_mib\": %.1f, \"peak_rss_mib\": %.1f}\n", (a - b) / t, rss / 1024, hwm / 1024
      }' >"$out.proc.json"
  fi
}

# The daemon alone (its children are the engines); LiteLLM with any workers it started.
# shellcheck disable=SC2207
LITELLM_PIDS=($(tree "$LITELLM_PID"))

echo "fake engine on port $ENGINE_PORT (TTFT $TTFT_MS ms, $ITL_MS ms between tokens, $TOKENS tokens);" \
  "Rigdeck daemon on $DAEMON_PORT; LiteLLM $LITELLM_VERSION on $LITELLM_PORT; $(nproc) CPUs"
[ -n "$GATEWAY" ] || echo "gateway: not available (this rigdeck serves no /v1 with API keys)"
for n in $STREAMS; do
  leg direct "$n" "$DIRECT" ""
  if [ -n "$GATEWAY" ]; then leg gateway "$n" "$GATEWAY" "$GATEWAY_KEY" "$DAEMON_PID"; fi
  leg litellm "$n" "http://127.0.0.1:$LITELLM_PORT/v1/chat/completions" "$LITELLM_KEY" "${LITELLM_PIDS[@]}"
done

python3 - "$WORK/results" "$STREAMS" <<'EOF'
import json, os, sys

results, streams = sys.argv[1], sys.argv[2].split()

def load(n, leg, suffix=".json"):
    path = os.path.join(results, f"{n}-{leg}{suffix}")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def fmt(value, spec):
    return "-" if value is None else format(value, spec)

def diff(a, b):
    return None if a is None or b is None else a - b

print()
print("| streams | leg | chunk latency added, median µs | p99 µs | TTFT added, ms "
      "| throughput tok/s | vs direct | CPU s | RSS MiB (peak) | errors |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n in streams:
    direct = load(n, "direct")
    for leg in ("direct", "gateway", "litellm"):
        r = load(n, leg)
        if r is None:
            if leg == "gateway":
                print(f"| {n} | gateway | not available | | | | | | | |")
            continue
        lat, ttft = r["chunk_latency_us"], r["ttft_ms"]
        if leg == "direct":
            # The direct row shows absolute figures: what the others are compared against.
            med, p99, t = (fmt(lat["median"], ".0f") + " (abs)", fmt(lat["p99"], ".0f") + " (abs)",
                           fmt(ttft["median"], ".1f") + " (abs)")
        else:
            d = direct["chunk_latency_us"] if direct else {}
            med = fmt(diff(lat["median"], d.get("median")), "+.0f")
            p99 = fmt(diff(lat["p99"], d.get("p99")), "+.0f")
            t = fmt(diff(ttft["median"], direct["ttft_ms"]["median"] if direct else None), "+.1f")
        ratio = (r["throughput_tok_s"] / direct["throughput_tok_s"]
                 if direct and direct["throughput_tok_s"] else None)
        proc = load(n, leg, ".proc.json") or {}
        rss = (f'{proc["rss_mib"]:.0f} ({proc["peak_rss_mib"]:.0f})'
               if "rss_mib" in proc else "-")
        errors = str(r["errors"])
        if r["chunks_without_emit_ns"]:
            errors += f' ({r["chunks_without_emit_ns"]} chunks without emit_ns)'
        print(f'| {n} | {leg} | {med} | {p99} | {t} | {r["throughput_tok_s"]:.0f} '
              f'| {fmt(ratio, ".3f")} | {fmt(proc.get("cpu_s"), ".2f")} | {rss} | {errors} |')
print()
# Issue 14's targets, at the largest stream count run.
n = streams[-1]
direct = load(n, "direct")
for leg in ("gateway", "litellm"):
    r = load(n, leg)
    if not (r and direct and direct["throughput_tok_s"]):
        continue
    added = diff(r["chunk_latency_us"]["p99"], direct["chunk_latency_us"]["p99"])
    ratio = r["throughput_tok_s"] / direct["throughput_tok_s"]
    verdict = "meets" if added is not None and added < 1000 and ratio >= 0.98 else "misses"
    print(f"{leg} at {n} streams: p99 added {fmt(added, '+.0f')} µs per chunk (target < 1000), "
          f"throughput {100 * ratio:.1f} % of direct (target >= 98 %): {verdict} the targets")
print()
print("Added figures are the leg's minus the direct leg's at the same stream count (median of "
      "every chunk's arrival minus its emit time; p99 likewise). CPU s and RSS: the proxy process "
      "(for the gateway the rigdeck daemon process, telemetry included, not the engine it runs) "
      "during its timed run.")
EOF
