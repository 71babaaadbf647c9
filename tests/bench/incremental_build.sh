#!/usr/bin/env bash
# Incremental build time after a small edit, three runs: how long a developer waits.
#   bash tests/bench/incremental_build.sh FILE CARGO-ARGS…
# e.g. bash tests/bench/incremental_build.sh crates/placement/src/kv.rs test --no-run -p rigdeck-placement --lib
# The edit changes a constant's value in FILE (its first `const NAME: TYPE = <number>;` line, so code
# that uses it is compiled again), or, in a file without one, appends an unused constant; the file
# is restored afterwards. Run from the repository root.
set -euo pipefail
file=$1
shift
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/rigdeck/target}
backup=$(mktemp)
cp "$file" "$backup"
trap 'cp "$backup" "$file"; rm -f "$backup"' EXIT
line=$(grep -n -m 1 -E '^(pub )?const [A-Z_]+: [a-z0-9]+ = [0-9_]+;' "$file" | cut -d: -f1 || true)
cargo "$@" -q >/dev/null 2>&1
for i in 1 2 3; do
  if [ -n "$line" ]; then
    sed -i -E "${line}s/= ([0-9_]+)( \+ 0 \* [0-9]+)?;/= \1 + 0 * $i;/" "$file"
  else
    echo "const _INCREMENTAL_BUILD_PROBE_$i: u32 = $i;" >>"$file"
  fi
  start=$(date +%s.%N)
  cargo "$@" -q >/dev/null 2>&1
  end=$(date +%s.%N)
  echo "run $i: $(echo "$end - $start" | bc) s"
done
