#!/usr/bin/env bash
# KL divergence of a ladder of quantizations and KV cache types of one model, measured by
# `rigdeck quality` on the built-in corpus as a user runs it: the real Gemma 3 270M (Q4_K_M from
# the package index) re-quantized by the bundled llama-quantize into F16 (the reference) and
# Q8_0, Q5_1, Q4_0, Q2_K; the F16 file also measured with q8_0 and q4_0 KV caches. Prints a
# Markdown table (Mean KLD, same top token, PPL ratio, wall time of each run), the reference's
# size and recording time, then the time Rigdeck adds over running the same llama-perplexity
# command by hand (alternated, 3 rounds, medians).
#
#   bash tests/bench/kld_ladder.sh            # KLD_CONTEXT=2048 KLD_CHUNKS=4 by default
#   KLD_LADDER=0 bash tests/bench/kld_ladder.sh   # only the reference and the time Rigdeck adds
set -euo pipefail

CACHE=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
RELEASE=$CARGO_TARGET_DIR/release
CONTEXT=${KLD_CONTEXT:-2048}
CHUNKS=${KLD_CHUNKS:-4}
cargo build -q --release -p rigdeck-server
GEMMA=$(bash tests/fixtures/gemma3_270m.sh)
SERVER=$(ls -t "$CACHE"/engines/llama.cpp-*-cpu-portable/bin/llama-server | head -n 1)
TOOLS=$(dirname "$SERVER")
if [ ! -x "$TOOLS/llama-perplexity" ]; then
  echo "kld_ladder: $TOOLS has no llama-perplexity: run \`make test-rust\` (it rebuilds the cached engine with its tools)" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/rigdeck-kld.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
"$TOOLS/llama-quantize" --allow-requantize "$GEMMA" "$WORK/gemma-F16.gguf" F16 >/dev/null 2>&1
for kind in Q8_0 Q5_1 Q4_0 Q2_K; do
  "$TOOLS/llama-quantize" "$WORK/gemma-F16.gguf" "$WORK/gemma-$kind.gguf" "$kind" >/dev/null 2>&1
done

export RIGDECK_CONFIG_DIR=$WORK/config RIGDECK_DATA_DIR=$WORK/data
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export RIGDECK_URL=http://127.0.0.1:$PORT
"$RELEASE/rigdeck" serve --bind "127.0.0.1:$PORT" >"$WORK/serve.log" 2>&1 &
until [ -s "$WORK/config/token" ]; do sleep 0.2; done
"$RELEASE/rigdeck" engines register "$SERVER" >/dev/null
BUILD=$("$RELEASE/rigdeck" engines list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["id"])')

start=$(date +%s.%N)
"$RELEASE/rigdeck" quality reference "$WORK/gemma-F16.gguf" --context "$CONTEXT" --chunks "$CHUNKS" >"$WORK/reference.txt"
end=$(date +%s.%N)
REF=$(sed -n 's/^reference \([^ ]*\) ready.*/\1/p' "$WORK/reference.txt")
echo "reference $REF: $(cat "$WORK/reference.txt") (command: $(python3 -c "print(f'{$end - $start:.1f}')") s)"

measure() { # name file kv
  "$RELEASE/rigdeck" profiles create "$1" --engine "$BUILD" --model "$2" --ctx "$CONTEXT" \
    --ctk "$3" --ctv "$3" >/dev/null
  "$RELEASE/rigdeck" quality kld "$1" --against "$REF" --json >"$WORK/$1.json" 2>/dev/null
}
LADDER=${KLD_LADDER:-1}
if [ "$LADDER" = 1 ]; then
  for kind in F16 Q8_0 Q5_1 Q4_0 Q2_K; do measure "$kind" "$WORK/gemma-$kind.gguf" f16; done
  for kv in q8_0 q4_0; do measure "F16-kv-$kv" "$WORK/gemma-F16.gguf" "$kv"; done
else
  "$RELEASE/rigdeck" profiles create Q4_0 --engine "$BUILD" --model "$WORK/gemma-Q4_0.gguf" --ctx "$CONTEXT" >/dev/null
fi

# The same command by hand, alternated with Rigdeck's run of it.
for round in 1 2 3; do
  "$RELEASE/rigdeck" quality kld Q4_0 --against "$REF" --json >"$WORK/again-$round.json" 2>/dev/null
  python3 - "$WORK/again-$round.json" "$WORK/hand-$round.txt" <<'PY'
import json, shlex, subprocess, sys, time
run = json.load(open(sys.argv[1]))
argv = shlex.split(run["context"]["kld"]["command_line"])
t = time.monotonic()
subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(sys.argv[2], "w").write(str(time.monotonic() - t))
PY
done

python3 - "$WORK" "$CONTEXT" "$CHUNKS" "$LADDER" <<'PY'
import json, statistics, sys
work, context, chunks, ladder = sys.argv[1:5]
print(f"\n| Candidate (reference: F16, built-in corpus, {chunks} windows of {context}) | Mean KLD | Same top token | PPL ratio | Wall |")
print("|---|---|---|---|---|")
for name in ["F16", "Q8_0", "Q5_1", "Q4_0", "Q2_K", "F16-kv-q8_0", "F16-kv-q4_0"] if ladder == "1" else []:
    k = json.load(open(f"{work}/{name}.json"))["kld"]
    label = name.replace("F16-kv-", "F16, KV ")
    print(f"| {label} | {k['mean']:.5f} ± {k['mean_unc']:.5f} | {100*k['same_top']:.2f} ± {100*k['same_top_unc']:.2f} % "
          f"| {k['ppl_ratio']:.4f} ± {k['ppl_ratio_unc']:.4f} | {k['wall_s']:.1f} s |")
daemon, hand = [], []
for r in (1, 2, 3):
    run = json.load(open(f"{work}/again-{r}.json"))
    daemon.append((run["finished_at_ms"] - run["started_at_ms"]) / 1000)
    hand.append(float(open(f"{work}/hand-{r}.txt").read()))
d, h = statistics.median(daemon), statistics.median(hand)
print(f"\nQ4_0 by Rigdeck (request to stored result, median of 3; {[round(x, 2) for x in daemon]}): {d:.2f} s; "
      f"the same llama-perplexity command by hand ({[round(x, 2) for x in hand]}): {h:.2f} s; Rigdeck adds {100*(d/h-1):+.1f} %")
PY
