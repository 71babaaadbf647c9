#!/usr/bin/env bash
# Rigdeck's downloader side by side with `hf download` (huggingface_hub from the Python package
# index) on the same local fake hub, in one run: a multi-GB, multi-file repository fetched cold,
# then again with a kill -9 at 50 % followed by a restart. Prints throughput and CPU seconds per
# GB for both, and the ratios. Each tool writes to its own cache folder on the same disk.
#
#   bash tests/bench/download_vs_hf.sh            # 4 files × 1 GiB
#   FILES=2 SIZE_MIB=512 bash tests/bench/download_vs_hf.sh
set -euo pipefail

FILES=${FILES:-4}
SIZE_MIB=${SIZE_MIB:-1024}
HF_VERSION=${HF_VERSION:-2.4.0}
CACHE=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
RELEASE=$CARGO_TARGET_DIR/release

cargo build -q --release -p rigdeck-server
cargo build -q --release -p rigdeck-hub --example fake_hub
VENV=$CACHE/bench/hf-$HF_VERSION
if [ ! -x "$VENV/bin/hf" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "huggingface_hub==$HF_VERSION"
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/rigdeck-download-bench.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# One GGUF quantization split into $FILES shards.
{
  printf '{"repos":[{"id":"bench/Big-GGUF","files":['
  for i in $(seq 1 "$FILES"); do
    [ "$i" -gt 1 ] && printf ','
    printf '{"path":"Q4_K_M/Big-Q4_K_M-%05d-of-%05d.gguf","size":%d}' "$i" "$FILES" $((SIZE_MIB << 20))
  done
  printf ']}]}\n'
} >"$WORK/spec.json"
"$RELEASE/examples/fake_hub" "$WORK/spec.json" >"$WORK/hub.url" &
until [ -s "$WORK/hub.url" ]; do sleep 0.2; done
export HF_ENDPOINT=$(head -n 1 "$WORK/hub.url")
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1 RIGDECK_CONFIG_DIR=$WORK/config RIGDECK_DATA_DIR=$WORK/data
TOTAL=$((FILES * SIZE_MIB << 20))

command_for() { # tool cache
  case $1 in
    hf) echo "$VENV/bin/hf download bench/Big-GGUF --include Q4_K_M/* --cache-dir $2" ;;
    rigdeck) echo "env HF_HUB_CACHE=$2 $RELEASE/rigdeck pull bench/Big-GGUF:Q4_K_M" ;;
  esac
}

# Runs a command under /usr/bin/time; prints "wall user+sys".
timed() {
  /usr/bin/time -f '%e %U %S' -o "$WORK/time" "$@" >/dev/null 2>"$WORK/stderr" || {
    cat "$WORK/stderr" >&2
    return 1
  }
  awk '{ printf "%s %.2f\n", $1, $2 + $3 }' "$WORK/time"
}

cold() { # tool → "wall cpu"
  local cache=$WORK/cache-$1
  rm -rf "$cache"
  sync
  timed $(command_for "$1" "$cache")
  rm -rf "$cache"
}

# Starts the tool, kills it with SIGKILL once half the bytes are on disk, then runs it again
# to the end; prints "wall cpu" of the whole (both runs) and of the restart alone.
killed_at_half() {
  local cache=$WORK/cache-$1
  rm -rf "$cache"
  sync
  local start=$(date +%s.%N)
  /usr/bin/time -f '%e %U %S' -o "$WORK/time-first" $(command_for "$1" "$cache") >/dev/null 2>&1 &
  local timer=$!
  while [ "$(du -sb "$cache" 2>/dev/null | cut -f1 || echo 0)" -lt $((TOTAL / 2)) ]; do sleep 0.05; done
  pkill -KILL -P "$timer" || true
  wait "$timer" 2>/dev/null || true
  local first_wall=$(echo "$(date +%s.%N) - $start" | bc)
  # /usr/bin/time saw its child killed; it still wrote the CPU the child used.
  local first_cpu=$(awk 'END { print $(NF-1) + $NF }' "$WORK/time-first" 2>/dev/null || echo 0)
  read -r wall cpu < <(timed $(command_for "$1" "$cache"))
  rm -rf "$cache"
  printf '%.2f %.2f %.2f\n' "$(echo "$first_wall + $wall" | bc)" "$(echo "$first_cpu + $cpu" | bc)" "$wall"
}

gb=$(printf '%.3f' "$(echo "scale=3; $TOTAL / 1000000000" | bc)")
echo "repository: $FILES files × $SIZE_MIB MiB ($gb GB), fake hub at $HF_ENDPOINT, huggingface_hub $HF_VERSION"
read -r hf_wall hf_cpu < <(cold hf)
read -r rd_wall rd_cpu < <(cold rigdeck)
read -r hfk_wall hfk_cpu hfk_restart < <(killed_at_half hf)
read -r rdk_wall rdk_cpu rdk_restart < <(killed_at_half rigdeck)

rate() { echo "scale=1; $TOTAL / $1 / 1000000" | bc; }     # MB/s over a wall time
per_gb() { echo "scale=2; $1 / $gb" | bc; }                # CPU s per GB
ratio() { printf '%.2f' "$(echo "scale=3; $1 / $2" | bc)"; }
cat <<EOF

| run | tool | wall s | MB/s | CPU s/GB |
|---|---|---|---|---|
| cold | hf download | $hf_wall | $(rate "$hf_wall") | $(per_gb "$hf_cpu") |
| cold | rigdeck pull | $rd_wall | $(rate "$rd_wall") | $(per_gb "$rd_cpu") |
| kill -9 at 50 %, restart | hf download | $hfk_wall (restart $hfk_restart) | $(rate "$hfk_wall") | $(per_gb "$hfk_cpu") |
| kill -9 at 50 %, restart | rigdeck pull | $rdk_wall (restart $rdk_restart) | $(rate "$rdk_wall") | $(per_gb "$rdk_cpu") |

cold: throughput $(ratio "$hf_wall" "$rd_wall")× hf download, CPU $(ratio "$rd_cpu" "$hf_cpu")× hf download
kill -9 at 50 %: throughput $(ratio "$hfk_wall" "$rdk_wall")× hf download, CPU $(ratio "$rdk_cpu" "$hfk_cpu")× hf download
EOF
