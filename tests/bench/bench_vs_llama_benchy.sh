#!/usr/bin/env bash
# Rigdeck's serving benchmark (`rigdeck bench`) side by side with llama-benchy (from the Python
# package index), both against one real llama-server in one run: Rigdeck's cached CPU build,
# started by Rigdeck from a launch profile (4 parallel slots, 2 threads) on a model (by default
# the tiny test model with a real Llama 3 tokenizer; MODEL=… for another GGUF). Each tool asks
# the engine's own /v1/chat/completions (llama-benchy speaks only chat) for the same shape —
# PROMPT prompt tokens, OUTPUT generated tokens, output length forced — at 1 and 4 concurrent
# streams: for each stream count, Rigdeck's step then llama-benchy's, each one untimed run then
# RUNS timed runs. Prints one Markdown table: TTFT median / p99, per-stream decode tok/s and
# TPOT, aggregate tok/s, prefill tok/s, with the ratio Rigdeck / llama-benchy, then the same
# engine's own figures from its log during each tool's step (the referee: a gap there is the
# engine running at a different speed, not the tools measuring differently), and the commands.
#
# Both tools' medians and p99s are computed the same way here (linear interpolation between
# order statistics, as Rigdeck's own summary does) from each tool's per-request or per-run
# values; llama-benchy's own report prints mean ± std of the same values. With RUNS=10, a p99 at
# 1 stream is nearly the largest of 10 requests. What the tools define differently, and so what
# a gap between their columns means:
#   - TTFT: both time a request from just before it is sent to the first SSE chunk whose delta
#     carries text (not a role-only opener). llama-benchy's e2e_ttft is that; its "est_ppt",
#     which its prefill speed divides by, is the first chunk of any kind (ttfr) minus a latency
#     probe (the mean of three GET /v1/models, --latency-mode api).
#   - Prompt length: Rigdeck fits the user message to exactly PROMPT tokens with the engine's own
#     /tokenize, so the chat template's tokens (and BOS) come on top; llama-benchy cuts tokens of a
#     book with a local tokenizer (here converted from the model's GGUF), subtracts the template's
#     overhead measured at warm-up, and decodes the cut, so the engine's whole prompt is about
#     PROMPT tokens (re-tokenizing the decoded cut moves it by a few). The "prompt tokens" row is
#     the engine's own count for each.
#   - Output tokens: both take usage.completion_tokens from the stream's last chunk (llama-benchy
#     would count token_ids per chunk first, which llama-server does not send). Rigdeck forces
#     the length with ignore_eos; llama-benchy's --exact-tg sends ignore_eos and min_tokens.
#   - Per-stream decode: Rigdeck's is 1 / TPOT, TPOT = (E2E − TTFT) / (tokens − 1) with E2E at the
#     last byte (usage chunk and [DONE] included); the median request of each run, then the median
#     over runs. llama-benchy's is (tokens − 1) / (last text chunk − first text chunk), per request
#     (its TPOT here is 1000 / that).
#   - Aggregate: Rigdeck divides all output tokens of a run by its wall time, from the sends to the
#     last byte (prefill included). llama-benchy divides the decode tokens (each request's first
#     left out) by the time from the earliest first token to the latest last token (prefill
#     excluded), and at 1 stream its "t/s" is that request's decode speed.
#   - Prefill: Rigdeck's is (prompt − cached) tokens / TTFT per request; llama-benchy's is prompt
#     tokens / est_ppt per request, cached tokens counted. The engine's own prompt tok/s divides
#     the tokens it computed by its compute time, with no HTTP, queueing or first decode step.
#   - Untimed runs: Rigdeck runs each point once "cold" (kept and shown, left out of the medians);
#     llama-benchy runs a "Warmup" batch per point that it discards; both then RUNS timed runs.
#     llama-benchy also sends two max_tokens=1 requests first (to size the template) and probes
#     latency. Before either tool, the script sends 2 × SLOTS untimed requests to the engine.
#   - Prompts: Rigdeck's are seeded random words behind a distinct tag per request, so no two
#     share more than the template's opening; llama-benchy's are random slices of a book (here
#     this repository's README and docs, since its default book is a download).
#   - Where the client runs: Rigdeck's requests go out from the daemon (Rust, tokio); llama-benchy
#     is a Python asyncio process. On 2 cores both take CPU from the engine's 2 threads, so the
#     engine itself runs at a different speed under each: the referee rows show by how much.
#
#   bash tests/bench/bench_vs_llama_benchy.sh            # or: make bench-harness
#   PROMPT=512 OUTPUT=128 RUNS=5 bash tests/bench/bench_vs_llama_benchy.sh
#   MODEL=/path/to/model.gguf bash tests/bench/bench_vs_llama_benchy.sh
#     (llama-benchy's tokenizer is converted from the model's GGUF; TOKENIZER=tokenizer.json else)
#   NO_BUILD=1 bash tests/bench/bench_vs_llama_benchy.sh   # with the release binary already built
#   KEEP=1 …   # keep the work folder: the engine's log, both tools' raw JSON
set -euo pipefail

PROMPT=${PROMPT:-256}      # prompt tokens per request
OUTPUT=${OUTPUT:-64}       # generated tokens per request
STREAMS=${STREAMS:-1 4}    # concurrent streams, one point each
RUNS=${RUNS:-10}           # timed runs per point (Rigdeck's --warm, llama-benchy's --runs)
THREADS=${THREADS:-2}      # llama-server -t
SLOTS=${SLOTS:-4}          # llama-server -np: the largest stream count runs at once
# Every slot holds a whole request (llama-server splits the context between its slots).
CTX=${CTX:-$((SLOTS * (PROMPT + OUTPUT + 128)))}
LLAMA_BENCHY_VERSION=${LLAMA_BENCHY_VERSION:-0.4.0}
GGUF_VERSION=${GGUF_VERSION:-0.19.0} # reads the model's tokenizer for llama-benchy
CACHE=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
RIGDECK=$CARGO_TARGET_DIR/release/rigdeck
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LLAMA_SERVER=${LLAMA_SERVER:-$(ls -t "$CACHE"/engines/llama.cpp-*-cpu-portable/bin/llama-server 2>/dev/null | head -n 1)}
if [ ! -x "$LLAMA_SERVER" ]; then
  echo "no llama-server: Rigdeck's CPU build is made by \`make test-rust\` (or set LLAMA_SERVER)" >&2
  exit 1
fi

if [ -z "${NO_BUILD:-}" ]; then # NO_BUILD=1: use the release binary already built
  cargo build -q --release -p rigdeck-server
fi
VENV=$CACHE/bench/llama-benchy-$LLAMA_BENCHY_VERSION
if [ ! -x "$VENV/bin/llama-benchy" ] || ! "$VENV/bin/python" -c 'import gguf' 2>/dev/null; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "llama-benchy==$LLAMA_BENCHY_VERSION" "gguf==$GGUF_VERSION"
fi

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/rigdeck-harness-bench.XXXXXX")
DAEMON_PID=
cleanup() {
  # The daemon stops the engines it started when it gets SIGTERM.
  if [ -n "$DAEMON_PID" ]; then
    kill "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  if [ -n "${KEEP:-}" ]; then echo "kept $WORK (logs, both tools' raw results)"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${MODEL:-}" ]; then
  VOCAB=$(ls "$CACHE"/sources/llama-cpp-python-*/llama.cpp/models/ggml-vocab-llama-bpe.gguf 2>/dev/null | head -n 1)
  [ -n "$VOCAB" ] || { echo "no llama.cpp source in $CACHE/sources (set MODEL)" >&2; exit 1; }
  MODEL=$WORK/tiny.gguf
  (cd "$ROOT" && cargo run -q -p rigdeck-gguf --example tiny_model -- "$VOCAB" "$MODEL" >/dev/null)
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A throwaway Rigdeck: its own config, data and cache folders, an empty model folder.
export RIGDECK_CONFIG_DIR=$WORK/config RIGDECK_DATA_DIR=$WORK/data RIGDECK_CACHE_DIR=$WORK/cache
export XDG_CONFIG_HOME=$WORK/xdg/config XDG_DATA_HOME=$WORK/xdg/data
mkdir -p "$RIGDECK_CONFIG_DIR" "$RIGDECK_DATA_DIR" "$WORK/models" "$WORK/results"
printf 'model_folders = ["%s"]\n' "$WORK/models" >"$RIGDECK_CONFIG_DIR/settings.toml"

"$RIGDECK" engines register "$LLAMA_SERVER" --backend cpu >"$WORK/register.log"
ENGINE_ID=$("$RIGDECK" engines list --json | jq -r --arg loc "$LLAMA_SERVER" \
  '[.[] | select(.location == $loc)][0].id')

DAEMON_PORT=$(free_port)
export RIGDECK_URL=http://127.0.0.1:$DAEMON_PORT
"$RIGDECK" serve --bind "127.0.0.1:$DAEMON_PORT" >"$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 150); do [ -s "$RIGDECK_CONFIG_DIR/token" ] && break; sleep 0.2; done
UP=
for _ in $(seq 150); do
  curl -sf -o /dev/null -H "Authorization: Bearer $(cat "$RIGDECK_CONFIG_DIR/token" 2>/dev/null)" \
    "$RIGDECK_URL/api/v1/status" && UP=1 && break
  sleep 0.2
done
[ -n "$UP" ] || { echo "the daemon did not answer within 30 s; its log:" >&2; tail -n 30 "$WORK/daemon.log" >&2; exit 1; }

"$RIGDECK" profiles create bench --engine "$ENGINE_ID" --model "$MODEL" --ctx "$CTX" --np "$SLOTS" \
  --threads "$THREADS" --no-restart >"$WORK/profile.log"
if ! "$RIGDECK" run bench >"$WORK/run.log" 2>&1; then
  cat "$WORK/run.log" >&2
  tail -n 30 "$WORK/daemon.log" >&2
  exit 1
fi
ENGINE_PORT=$("$RIGDECK" ps --json | jq -r '.[] | select(.name == "bench") | .port')
ENGINE=http://127.0.0.1:$ENGINE_PORT

# llama-benchy's tokenizer, from the model's own GGUF metadata (it wants a tokenizer.json or a
# Hugging Face repository; there is none offline). Converted as transformers converts GGUF
# tokenizers, without the torch import its GGUF reader makes.
TOKENIZER=${TOKENIZER:-$WORK/tokenizer.json}
if [ ! -s "$TOKENIZER" ]; then
  HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error "$VENV/bin/python" - "$MODEL" "$TOKENIZER" <<'EOF'
import sys
from gguf import GGUFReader
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

fields = GGUFReader(sys.argv[1]).fields
meta = {name: f.contents() for name, f in fields.items()
        if name.startswith("tokenizer.") or name == "general.architecture"}
tokenizer = {new: meta[f"tokenizer.{old}"] for old, new in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
             if f"tokenizer.{old}" in meta}
backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tokenizer)
backend.save(sys.argv[2])
EOF
fi
# llama-benchy's book: it downloads one (Sherlock Holmes) unless its cache, in
# ~/.cache/llama-benchy/md5(URL).txt, already holds the URL's text. HOME is a throwaway folder
# for it, and the cache is seeded with this repository's README and docs.
BENCHY_HOME=$WORK/benchy-home
BOOK_URL=file://$WORK/book.txt
cat "$ROOT/README.md" "$ROOT"/docs/*.md >"$WORK/book.txt"
mkdir -p "$BENCHY_HOME/.cache/llama-benchy"
cp "$WORK/book.txt" "$BENCHY_HOME/.cache/llama-benchy/$(printf '%s' "$BOOK_URL" | md5sum | cut -d' ' -f1).txt"

# The two tools' commands for one stream count and attempt (see the retries below). Rigdeck's
# seed changes with both: a request's opening tag comes from the seed and its index in the
# benchmark, so two benchmarks with one seed send the same prompts and llama-server answers the
# second from its prompt cache (a TTFT without prefill). llama-benchy cuts each prompt from a
# random place in its book.
rigdeck_cmd() { # STREAMS ATTEMPT
  echo rigdeck bench bench --shape "$PROMPT:$OUTPUT" -c "$1" --warm "$RUNS" --api chat \
    --seed "$((100 * $1 + $2))" --json
}
benchy_cmd() { # STREAMS
  echo llama-benchy --base-url "$ENGINE/v1" --model bench --tokenizer "$TOKENIZER" \
    --book-url "$BOOK_URL" --pp "$PROMPT" --tg "$OUTPUT" --exact-tg --concurrency "$1" \
    --runs "$RUNS" --skip-coherence --format json --save-result "$WORK/results/benchy-$1.json" \
    --exit-on-first-fail
}

echo "llama-server $(basename "$(dirname "$(dirname "$LLAMA_SERVER")")") on port $ENGINE_PORT" \
  "(-np $SLOTS -t $THREADS -c $CTX), model $(basename "$MODEL") ($(du -h "$MODEL" | cut -f1))," \
  "llama-benchy $LLAMA_BENCHY_VERSION, $(nproc) CPUs"
# Untimed requests first (the first ones after a load run slow: page faults, cold caches), so
# neither tool's cold run pays for them alone.
for _ in 1 2; do
  WARM_PIDS=()
  for _ in $(seq "$SLOTS"); do
    curl -sf -o /dev/null "$ENGINE/v1/chat/completions" -H 'content-type: application/json' \
      -d "{\"messages\": [{\"role\": \"user\", \"content\": \"Warm up.\"}], \"max_tokens\": $OUTPUT, \"ignore_eos\": true}" &
    WARM_PIDS+=($!)
  done
  wait "${WARM_PIDS[@]}" # not the daemon's
done
ENGINE_LOG=$RIGDECK_DATA_DIR/logs/bench.log # the engine's output, as Rigdeck's supervisor keeps it

# leg TOOL STREAMS: one tool's step, tried up to TRIES times. llama-server (this build) closes
# the connection after every streamed answer without saying so (its chunked content provider
# returns false after the last chunk, which cpp-httplib takes as a cancel; no "Connection:
# close"), so a client that pools connections now and then sends its next request on one that is
# closing: Rigdeck's runner then stops with "cannot build a prompt of N tokens: connection closed
# before message completed" (its /tokenize), llama-benchy with "Server disconnected". Each failed
# attempt is shown; the step starts over with fresh prompts. The engine's log lines of the
# attempt that counts go to results/engine-TOOL-STREAMS.log.
TRIES=${TRIES:-8}
USED=()
leg() {
  local tool=$1 n=$2 try start lines cmd
  for try in $(seq "$TRIES"); do
    if [ "$tool" = rigdeck ]; then cmd=$(rigdeck_cmd "$n" "$try"); else cmd=$(benchy_cmd "$n"); fi
    echo "$cmd"
    read -ra CMD <<<"$cmd"
    sleep 1 # the engine's last lines reach the log
    lines=$(wc -l <"$ENGINE_LOG")
    start=$SECONDS
    if [ "$tool" = rigdeck ]; then
      "$RIGDECK" "${CMD[@]:1}" >"$WORK/results/rigdeck-$n.json" 2>"$WORK/$tool-$n.log" &&
        ok=1 || ok=
    else
      HOME=$BENCHY_HOME HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
        "$VENV/bin/${CMD[0]}" "${CMD[@]:1}" >"$WORK/$tool-$n.log" 2>&1 && ok=1 || ok=
    fi
    if [ -n "$ok" ]; then
      sleep 1
      sed -n "$((lines + 1)),\$p" "$ENGINE_LOG" >"$WORK/results/engine-$tool-$n.log"
      echo "  done in $((SECONDS - start)) s"
      USED+=("$cmd")
      return 0
    fi
    echo "  attempt $try failed after $((SECONDS - start)) s: $(grep -E 'failed:|Error|error' \
      "$WORK/$tool-$n.log" | tail -n 1)"
  done
  tail -n 20 "$WORK/$tool-$n.log" >&2
  exit 1
}
for n in $STREAMS; do
  leg rigdeck "$n"
  leg benchy "$n"
done
grep -hE 'Delta|No complete token_ids|tokenization|Falling back' "$WORK"/benchy-*.log | sort -u |
  sed 's/^ */  llama-benchy: /' || true

python3 - "$WORK/results" "$STREAMS" "$RUNS" "$OUTPUT" <<'EOF'
import json, math, os, re, sys

results, streams = sys.argv[1], [int(n) for n in sys.argv[2].split()]
runs, output = int(sys.argv[3]), int(sys.argv[4])

def pct(values, p):
    """The pth percentile, linear between order statistics (numpy's default, Rigdeck's too)."""
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    if not v:
        return None
    rank = p / 100 * (len(v) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)

rig = {}
for n in streams:
    with open(os.path.join(results, f"rigdeck-{n}.json")) as f:
        rig[n] = json.load(f)
benchy = {}
for n in streams:
    with open(os.path.join(results, f"benchy-{n}.json")) as f:
        benchy[n] = json.load(f)

def rig_step(n):
    return next((step for step in rig[n]["results"]
                 if step["point"]["load"].get("concurrency") == n), None)

def rig_stat(n, key, p=50):
    step = rig_step(n)
    stats = (step or {}).get("summary", {}).get(key) if step else None
    if not stats:
        return None
    return stats["median"] if p == 50 else stats["p99"] if p == 99 else None

def benchy_run(n):
    for run in benchy[n]["benchmarks"]:
        if run["concurrency"] == n and not run["is_context_prefill_phase"]:
            return run
    return None

def benchy_values(n, key):
    run = benchy_run(n)
    metric = run.get(key) if run else None
    return metric["values"] if metric else []


# llama-server's log, per task: "prompt eval time = … / N tokens (…, X tokens per second)" (the
# tokens it computed, cached ones left out), "eval time = …" (generated), and "stop processing:
# n_tokens = N" (prompt + generated − 1), in the order requests finished. Requests of the shape
# (the output length asked) only; each tool sends one untimed batch of `streams` requests, then
# `runs` timed ones.
TIMING = re.compile(r"task (\d+) \|\s+(prompt eval|eval) time =\s*[\d.]+ ms /\s*(\d+) tokens "
                    r"\(.*?([\d.]+) tokens per second\)")
STOP = re.compile(r"task (\d+) \| stop processing: n_tokens = (\d+)")
def engine_timings(name, n):
    tasks, order = {}, []
    with open(os.path.join(results, f"engine-{name}.log")) as f:
        for line in f:
            m, stop = TIMING.search(line), STOP.search(line)
            task = (m or stop).group(1) if (m or stop) else None
            if task is None:
                continue
            if task not in tasks:
                tasks[task] = {}
                order.append(task)
            if m:
                tasks[task][m.group(2)] = (int(m.group(3)), float(m.group(4)))
            else:
                tasks[task]["n_tokens"] = int(stop.group(2))
    done = [tasks[t] for t in order if tasks[t].get("eval", (0,))[0] == output]
    for t in done:
        if "n_tokens" in t:
            t["prompt"] = (t["n_tokens"] + 1 - output, None)
    if len(done) != (1 + runs) * n:
        print(f"note: {name}: the engine's log shows {len(done)} requests of {output} generated "
              f"tokens, {(1 + runs) * n} expected")
    return done[n:]  # the untimed batch left out
engine = {"rigdeck": {}, "benchy": {}}
for n in streams:
    for tool in engine:
        engine[tool][n] = engine_timings(f"{tool}-{n}", n)
def engine_values(name, n, kind, index=1):
    return [t[kind][index] for t in engine[name].get(n, []) if kind in t]

rows = []  # (figure, streams, rigdeck, llama-benchy, decimals)
for n in streams:
    tpot_b = [1000 / v for v in benchy_values(n, "tg_req_throughput") if v]
    rows += [
        ("TTFT median, ms", n, rig_stat(n, "ttft_ms"), pct(benchy_values(n, "e2e_ttft"), 50), 1),
        ("TTFT p99, ms", n, rig_stat(n, "ttft_ms", 99), pct(benchy_values(n, "e2e_ttft"), 99), 1),
        ("per-stream decode tok/s, median", n, rig_stat(n, "stream_tps"),
         pct(benchy_values(n, "tg_req_throughput"), 50), 1),
        ("TPOT median, ms", n, rig_stat(n, "tpot_ms"), pct(tpot_b, 50), 2),
        ("aggregate output tok/s, median", n, rig_stat(n, "aggregate_tps"),
         pct(benchy_values(n, "tg_throughput"), 50), 1),
        ("prefill tok/s per request, median", n, rig_stat(n, "prefill_tps"),
         pct(benchy_values(n, "pp_req_throughput"), 50), 0),
        ("prompt tokens (engine's log), median", n, pct(engine_values("rigdeck", n, "prompt", 0), 50),
         pct(engine_values("benchy", n, "prompt", 0), 50), 0),
        ("llama-server's own decode tok/s (its log), median", n,
         pct(engine_values("rigdeck", n, "eval"), 50), pct(engine_values("benchy", n, "eval"), 50), 1),
        ("llama-server's own prompt tok/s (its log), median", n,
         pct(engine_values("rigdeck", n, "prompt eval"), 50),
         pct(engine_values("benchy", n, "prompt eval"), 50), 0),
    ]

def fmt(value, decimals):
    if value is None:
        return "–"
    return f"{value:,.{decimals}f}".replace(",", " ")

print()
print("| figure | streams | Rigdeck | llama-benchy | Rigdeck / llama-benchy |")
print("|---|---|---|---|---|")
for figure, n, a, b, decimals in sorted(rows, key=lambda r: (r[1], 0)):
    ratio = a / b if a is not None and b else None
    print(f"| {figure} | {n} | {fmt(a, decimals)} | {fmt(b, decimals)} | {fmt(ratio, 3)} |")
print()
for n in streams:
    cold = next((r for r in (rig_step(n) or {}).get("runs", []) if r["cold"]), None)
    parts = []
    if cold and cold.get("aggregate_tps") is not None:
        parts.append(f"Rigdeck's cold run {cold['aggregate_tps']:.1f} tok/s aggregate, TTFT "
                     f"{cold['ttft_ms']:.1f} ms (left out above)")
    if parts:
        print(f"{n} stream{'s' if n > 1 else ''}: " + "; ".join(parts) + ".")
probes = ", ".join(f"{benchy[n].get('latency_ms', 0):.2f}" for n in streams)
print(f"llama-benchy's latency probe: {probes} ms (subtracted from its prefill time, not from "
      "TTFT).")
failed = sum((s.get("summary") or {}).get("failed_requests", 0)
             for n in streams for s in rig[n]["results"])
print(f"failed requests: Rigdeck {failed}, llama-benchy 0 (it stops at its first; the step then "
      "starts over).")
EOF
echo
echo "Commands (the engine at $ENGINE, the daemon at $RIGDECK_URL):"
for cmd in "${USED[@]}"; do echo "  $cmd"; done
