#!/usr/bin/env bash
# Time from `dpkg -i` of the release .deb (`make package`) to the installed daemon serving the
# dashboard with a telemetry frame and the shipped engine registered, on a fresh user each time
# (the NVML test library plays the 4× RTX 3090 rig). Runs as root; removes the package after
# each run. Prints each run and the median.   Usage: make bench-package [RUNS=5]
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/package/dashboard.sh
target=${CARGO_TARGET_DIR:-$HOME/.cache/rigdeck/target}
deb=$(ls "$target"/packages/*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { echo "bench-package: no .deb in $target/packages: run \`make package\` first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "bench-package: dpkg -i needs root" >&2; exit 1; }
export RIGDECK_NVML_LIBRARY=$target/debug/libnvml_double.so
export RIGDECK_NVML_DOUBLE_RIG=$PWD/tests/fixtures/rigs/4x3090.json
runs=${RUNS:-5}
times=()
for run in $(seq 1 "$runs"); do
  home=$(mktemp -d)
  port=$(free_port)
  url=http://127.0.0.1:$port
  started=$(date +%s.%N)
  dpkg -i "$deb" >/dev/null
  HOME=$home /usr/bin/rigdeck serve --bind "127.0.0.1:$port" >/dev/null 2>&1 &
  pid=$!
  token=$home/.config/rigdeck/token
  for _ in $(seq 1 600); do
    dashboard_ready "$url" "$token" && break
    sleep 0.05
  done
  dashboard_ready "$url" "$token" || { kill "$pid"; dpkg -r rigdeck >/dev/null; echo "bench-package: not ready within 30 s" >&2; exit 1; }
  elapsed=$(python3 -c "import time,sys; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$started")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  dpkg -r rigdeck >/dev/null
  rm -rf "$home"
  echo "run $run: ${elapsed} s"
  times+=("$elapsed")
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print "median: " a[int((NR+1)/2)] " s"}'
ls -l "$target"/packages/ | awk 'NR>1 {printf "%s  %.1f MiB\n", $NF, $5/1048576}'
