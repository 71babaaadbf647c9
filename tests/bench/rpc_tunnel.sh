#!/usr/bin/env bash
# llama.cpp RPC through Rigdeck's fleet tunnel against the same RPC connection made directly.
# Two hosts on one machine: network namespaces joined by a veth pair, shaped with
# `tc qdisc … netem rate` to 1 Gbit/s, then 2.5 Gbit/s. In the lender's namespace a real
# `rigdeck serve` (fleet listener on the veth address); in the head's another one, paired with it.
# The same model (Gemma 3 270M Q4_K_M, half its layers on the lent CPU, the rest on the head's)
# runs on the head's llama-server two ways, in one run per rate:
#   direct: `--rpc LENDER_IP:PORT` to an rpc-server bound to the veth address (in this bench
#           only: Rigdeck never does that);
#   tunnel: `--rpc 127.0.0.1:P` from `rigdeck fleet lend`, the lender's rpc-server on its
#           loopback, the bytes inside the daemons' pinned TLS connection.
# Per way: load time (llama-server start to /health 200), decode tok/s (llama-server's own
# timing of 128 tokens, median of RUNS completions), the best of ROUNDS rounds alternating the two
# ways (the machine may be shared); for the tunnel, both daemons' CPU seconds (user + system,
# /proc) per GB the tunnel moved. Prints one Markdown table.
#
# Needs root (namespaces, tc). RIGDECK_BIN (default: the release build in $CARGO_TARGET_DIR, else
# target/), RIGDECK_NVML_LIBRARY, LLAMA_BIN_DIR (default: Rigdeck's cached portable CPU build,
# with rpc-server), MODEL, RUNS (default 3), ROUNDS (default 3), NGL (default 9 of Gemma's 18 layers), RATES,
# PIN (a CPU list, `0:1`: llama-server and both rpc-servers on the first CPUs, both daemons on the
# second, so the daemons have cores of their own, as on a machine with cores to spare; unset:
# everything shares every core).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
bin="${RIGDECK_BIN:-$target/release/rigdeck}"
nvml="${RIGDECK_NVML_LIBRARY:-$target/release/libnvml_double.so}"
cache="${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}"
llama_bin="${LLAMA_BIN_DIR:-$(ls -td "$cache"/engines/llama.cpp-*-cpu-portable/bin | head -n 1)}"
model="${MODEL:-$cache/models/gemma-3-270m-q4_k_m.gguf}"
runs="${RUNS:-3}"
rounds="${ROUNDS:-3}"
ngl="${NGL:-9}"
rates="${RATES:-1gbit 2.5gbit}"
pin="${PIN:-}"
every_cpu="0-$(($(nproc --all) - 1))"
compute_cpus="${pin:-$every_cpu}" compute_cpus="${compute_cpus%%:*}"
daemon_cpus="${pin:-$every_cpu}" daemon_cpus="${daemon_cpus##*:}"
[[ "$(id -u)" == 0 ]] || { echo "run as root: the bench makes network namespaces and shapes their link with tc" >&2; exit 1; }
for file in "$bin" "$nvml" "$llama_bin/llama-server" "$llama_bin/rpc-server"; do
  [[ -e "$file" ]] || {
    echo "$file is missing: build it first (cargo build --release -p rigdeck-server -p rigdeck-nvml-double; the engine build test builds llama.cpp with rpc-server)" >&2
    exit 1
  }
done
[[ -f "$model" ]] || model="$(bash "$root/tests/fixtures/gemma3_270m.sh")"

id=$$
lender_ns="rdbl$id" head_ns="rdbh$id"
lender_ip=10.253.0.1 head_ip=10.253.0.2
lender_link="rdbl$id" head_link="rdbh$id"
work="$(mktemp -d -t rigdeck-rpc-bench-XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$lender_ns" 2>/dev/null || true
  ip netns del "$head_ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$lender_ns"
ip netns add "$head_ns"
ip link add "$lender_link" netns "$lender_ns" type veth peer name "$head_link" netns "$head_ns"
ip -n "$lender_ns" link set lo up
ip -n "$head_ns" link set lo up
ip -n "$lender_ns" addr add "$lender_ip/30" dev "$lender_link"
ip -n "$head_ns" addr add "$head_ip/30" dev "$head_link"
ip -n "$lender_ns" link set "$lender_link" up
ip -n "$head_ns" link set "$head_link" up

# shape RATE: both directions of the link at RATE, with netem (or tbf where the kernel has no
# netem: the same rate limit, without netem's other knobs); the qdisc used in $qdisc.
qdisc=netem
shape() {
  local ns link
  for ns_link in "$lender_ns:$lender_link" "$head_ns:$head_link"; do
    ns="${ns_link%%:*}" link="${ns_link##*:}"
    if ! ip netns exec "$ns" tc qdisc replace dev "$link" root netem rate "$1" 2>/dev/null; then
      qdisc=tbf
      ip netns exec "$ns" tc qdisc replace dev "$link" root tbf rate "$1" burst 1mb latency 50ms
    fi
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# inside NAME CMD…: CMD inside the namespace of the daemon NAME (lender or head), with its folders.
inside() {
  local name="$1" ns dir="$work/$1"
  shift
  [[ "$name" == lender ]] && ns="$lender_ns" || ns="$head_ns"
  ip netns exec "$ns" env RIGDECK_CONFIG_DIR="$dir/config" RIGDECK_DATA_DIR="$dir/data" \
    RIGDECK_CACHE_DIR="$dir/cache" RIGDECK_NVML_LIBRARY="$nvml" RIGDECK_NVML_DOUBLE_RIG="$root/tests/fixtures/rigs/cpu-only.json" \
    RIGDECK_URL="http://127.0.0.1:$(cat "$dir/port" 2>/dev/null || echo 0)" RUST_LOG=warn "$@"
}

# start NAME IP: its daemon, fleet listener on IP; the pid in $work/NAME/pid.
start() {
  local name="$1" ip="$2" dir="$work/$1"
  mkdir -p "$dir/config/fleet"
  echo "$name" >"$dir/config/fleet/name"
  free_port >"$dir/port"
  inside "$name" "$bin" engines register "$llama_bin/llama-server" >/dev/null
  inside "$name" taskset -c "$daemon_cpus" "$bin" serve --bind "127.0.0.1:$(cat "$dir/port")" \
    --fleet-bind "$ip:$(free_port)" >"$dir/out.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 300); do
    inside "$name" "$bin" fleet identity >/dev/null 2>&1 && {
      pgrep -f -n "serve --bind 127.0.0.1:$(cat "$dir/port")" >"$dir/pid"
      # $! above is the backgrounded function's subshell: the daemon itself is this pid.
      pids+=("$(cat "$dir/pid")")
      return 0
    }
    sleep 0.2
  done
  echo "$name did not start: $(tail -n 5 "$dir/out.log")" >&2
  exit 1
}

start lender "$lender_ip"
start head "$head_ip"
code="$(inside lender "$bin" fleet invite 2>/dev/null)"
inside head "$bin" fleet join "$code" >/dev/null

# cpu_seconds PID: user + system seconds of the process so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# measure RPC: load seconds and median decode tok/s of the head's llama-server on RPC endpoint.
measure() {
  local port log start_ns end_ns
  port="$(free_port)"
  log="$work/llama-server.log"
  start_ns="$(date +%s%N)"
  ip netns exec "$head_ns" taskset -c "$compute_cpus" "$llama_bin/llama-server" -m "$model" \
    --rpc "$1" --device RPC0 -ngl "$ngl" -c 1024 -t 1 --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
  local server=$!
  until ip netns exec "$head_ns" curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do
    kill -0 "$server" 2>/dev/null || { echo "llama-server failed: $(tail -n 5 "$log")" >&2; exit 1; }
    sleep 0.05
  done
  end_ns="$(date +%s%N)"
  local speeds=()
  for _ in $(seq 1 "$runs"); do
    speeds+=("$(ip netns exec "$head_ns" curl -sf "http://127.0.0.1:$port/completion" \
      -d '{"prompt": "Once upon a time", "n_predict": 128, "temperature": 0, "cache_prompt": false, "ignore_eos": true}' |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["timings"]["predicted_per_second"])')")
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  python3 -c 'import statistics, sys; print(f"{(int(sys.argv[2]) - int(sys.argv[1])) / 1e9:.2f} {statistics.median(map(float, sys.argv[3:])):.2f}")' \
    "$start_ns" "$end_ns" "${speeds[@]}"
}

echo "| link | way | load (s) | decode (tok/s) | tunnel ÷ direct | daemons' CPU s per GB moved |"
echo "|---|---|---|---|---|---|"
# direct_round: load and tok/s through an rpc-server on the veth address (the exposure Rigdeck
# exists to avoid).
direct_round() {
  local rpc_port server
  rpc_port="$(free_port)"
  ip netns exec "$lender_ns" taskset -c "$compute_cpus" "$llama_bin/rpc-server" -H "$lender_ip" \
    -p "$rpc_port" -d CPU >"$work/rpc-direct.log" 2>&1 &
  server=$!
  until ip netns exec "$head_ns" bash -c "exec 3<>/dev/tcp/$lender_ip/$rpc_port" 2>/dev/null; do sleep 0.05; done
  measure "$lender_ip:$rpc_port"
  kill "$server"
  wait "$server" 2>/dev/null || true
}

daemons_cpu() {
  python3 -c 'import sys; print(sum(map(float, sys.argv[1:])))' \
    "$(cpu_seconds "$(cat "$work/lender/pid")")" "$(cpu_seconds "$(cat "$work/head/pid")")"
}

# tunnel_round: load, tok/s, the daemons' CPU seconds and the bytes moved, through a lease.
tunnel_round() {
  local endpoint before load tps after leases lease moved
  endpoint="$(inside head "$bin" fleet lend lender --devices CPU 2>/dev/null)"
  if [[ -n "$pin" ]]; then
    # The lender's daemon started it on the daemons' CPUs: it computes beside llama-server.
    for pid in $(pgrep -f "rpc-server -H 127.0.0.1"); do taskset -a -p -c "$compute_cpus" "$pid" >/dev/null; done
  fi
  before="$(daemons_cpu)"
  read -r load tps < <(measure "$endpoint")
  after="$(daemons_cpu)"
  leases="$(inside head "$bin" fleet lend --list --json)"
  lease="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["taken"][0]["lease"])' "$leases")"
  moved="$(python3 -c 'import json, sys; t = json.loads(sys.argv[1])["taken"][0]; print(t["bytes_sent"] + t["bytes_received"])' "$leases")"
  inside head "$bin" fleet lend --release "$lease" >/dev/null
  echo "$load $tps $(python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$before" "$after") $moved"
}

for rate in $rates; do
  shape "$rate"
  : >"$work/direct"
  : >"$work/tunnel"
  # Alternated, so both ways see the same machine; the best round of each way is kept.
  for _ in $(seq 1 "$rounds"); do
    direct_round >>"$work/direct"
    tunnel_round >>"$work/tunnel"
  done
  python3 - "$rate" "$work/direct" "$work/tunnel" <<'EOF'
import sys
rate, direct_file, tunnel_file = sys.argv[1:]
direct = [list(map(float, l.split())) for l in open(direct_file) if l.strip()]
tunnel = [list(map(float, l.split())) for l in open(tunnel_file) if l.strip()]
dl, dt = min(r[0] for r in direct), max(r[1] for r in direct)
tl, tt = min(r[0] for r in tunnel), max(r[1] for r in tunnel)
cpu, moved = sum(r[2] for r in tunnel), sum(r[3] for r in tunnel)
link = rate.replace("gbit", " Gbit/s")
print(f"| {link} | direct | {dl:.2f} | {dt:.1f} | | |")
print(f"| {link} | tunnel | {tl:.2f} | {tt:.1f} | decode {tt / dt:.1%}, load {tl / dl:.2f}× | {cpu / (moved / 1e9):.2f} ({moved / 1e6 / len(tunnel):.0f} MB a round) |")
EOF
done
echo
[[ -z "$pin" ]] || echo "Pinned: llama-server and the rpc-servers on CPUs $compute_cpus, both daemons on CPUs $daemon_cpus."
echo "Link shaped with tc qdisc $qdisc; best of $rounds alternated round(s) per way, each a fresh llama-server (load) and the median of $runs completion(s) of 128 tokens (decode); $(basename "$model"), -ngl $ngl on RPC0."
