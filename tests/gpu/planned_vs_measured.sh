#!/usr/bin/env bash
# What only a machine with an NVIDIA GPU can show, checked through Rigdeck's own commands:
#   1. NVML through nvml-wrapper against the real driver (`rigdeck gpus`, beside nvidia-smi),
#      and the daemon's CPU cost per telemetry sample with the real driver;
#   2. a CUDA build of llama.cpp through `rigdeck engines build --backend cuda` (architectures
#      from the detected compute capability);
#   3. planned against measured VRAM: synthetic models (a dense GQA model and an MoE, zero weights,
#      real tokenizer) planned on the live GPU, compared with `llama-fit-params` of the CUDA build,
#      then started as launch profiles through the daemon (`rigdeck run`) and measured by NVML per
#      process (`rigdeck ps --json`) and by the GPU's used-memory delta; one chat completion each;
#   4. the MoE with `-ot` sending two GPU-held layers' experts to the host: CUDA0's compute buffer
#      from llama-fit-params (op offload on and off, micro-batches past and under the offload
#      threshold) beside the plan's.
#
# Not part of `make test` (CI has no GPU). Needs: nvidia-smi, nvcc, cmake, ninja, python3, curl.
# BACKEND=cpu runs the same steps without a GPU (with the NVML test double and any nvidia-smi
# stand-in), to check the script itself.
#   RIGDECK_BIN=.../release/rigdeck TINY_MODEL_BIN=.../release/examples/tiny_model \
#   LLAMA_SOURCE=llama.cpp.tar.gz LLAMA_SOURCE_SHA256=... VOCAB=ggml-vocab-llama-bpe.gguf \
#   OUT=results/ bash tests/gpu/planned_vs_measured.sh
set -uo pipefail
: "${RIGDECK_BIN:?the rigdeck binary}" "${TINY_MODEL_BIN:?the tiny_model example binary}"
: "${LLAMA_SOURCE:?a llama.cpp source archive}" "${LLAMA_SOURCE_SHA256:?its sha256}"
: "${VOCAB:?a models/ggml-vocab-*.gguf file}"
OUT=${OUT:-$PWD/gpu-check}
CTX=${CTX:-8192}
# The routed experts of layers 1 and 2 sent to the host (the -ot checks below).
OT='blk\.(1|2)\.ffn_.*_exps\.=CPU'
# cpu checks the script's own plumbing on a machine without a GPU (with the NVML test double).
BACKEND=${BACKEND:-cuda}
mkdir -p "$OUT"
# A fixed folder: run again on the same machine, the CUDA build is reused.
work=${WORK:-/tmp/rigdeck-gpu-check}
mkdir -p "$work"
export RIGDECK_CONFIG_DIR=$work/config RIGDECK_DATA_DIR=$work/data RIGDECK_CACHE_DIR=$work/cache
rigdeck() { "$RIGDECK_BIN" "$@"; }
step() { printf '\n== %s\n' "$*"; }
serve= build=
trap 'for p in $serve $build; do kill "$p" 2>/dev/null; done; wait 2>/dev/null' EXIT

# Nanoseconds on CPU of every thread of a process (schedstat is precise where /proc/PID/stat
# counts 10 ms ticks).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1; }

step "driver and GPUs: nvidia-smi, then Rigdeck's NVML readout"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max \
  --format=csv | tee "$OUT/nvidia-smi.csv"
rigdeck gpus | tee "$OUT/gpus.txt"
rigdeck gpus --json >"$OUT/gpus.json" || echo "rigdeck gpus --json failed"

step "$BACKEND build of llama.cpp through rigdeck engines build (in the background)"
# The build is the long step: the daemon's telemetry cost is measured while it runs (CPU time of
# the daemon's own threads, which the build's load does not add to).
started=$(date +%s)
rigdeck engines build --backend "$BACKEND" --source "$LLAMA_SOURCE" --source-sha256 "$LLAMA_SOURCE_SHA256" \
  -j "$(nproc)" >"$OUT/build.log" 2>&1 &
build=$!

step "daemon CPU cost per 1 s telemetry sample with the real driver (${SAMPLE_S:=30} s, no browser)"
# The binary itself in the background (not the wrapper function), so $! is its pid.
"$RIGDECK_BIN" serve >"$work/serve.log" 2>&1 &
serve=$!
# Past the start (the host's memory bandwidth is probed once then: a second or two of reading).
sleep 10
before=$(cpu_ns "$serve")
sleep "$SAMPLE_S"
after=$(cpu_ns "$serve")
python3 -c "import sys; ns=$after-$before; print(f'rigdeck serve: {ns/$SAMPLE_S/1e6:.2f} ms CPU per sample, {ns/$SAMPLE_S/1e9*100:.3f} % of one core')" | tee "$OUT/serve-cpu.txt"
grep VmHWM /proc/"$serve"/status | tee -a "$OUT/serve-cpu.txt"
step "synthetic models (zero weights, real tokenizer) while the build runs"
"$TINY_MODEL_BIN" "$VOCAB" "$work/dense.gguf" --layers 16 --embd 4096 --heads 32 --kv-heads 8 --ff 14336 --zeros
"$TINY_MODEL_BIN" "$VOCAB" "$work/moe.gguf" --layers 16 --embd 2048 --heads 16 --kv-heads 4 --ff 1024 --experts 64/8 --zeros
# Models written by the pinned tree's own gguf-py (header only, sparse) for the dry runs below.
mkdir -p "$work/source"
tar -xzf "$LLAMA_SOURCE" -C "$work/source" --wildcards '*/gguf-py/*'
gguf_py=$(find "$work/source" -maxdepth 3 -type d -name gguf-py | head -n 1)
write_model() { "${PYTHON:-python3}" tests/gguf_py/write_model.py "$gguf_py" "$work/$1.gguf" "$2"; }
write_model llama '{"arch":"llama","n_vocab":32000,"n_embd":4096,"n_layer":8,"n_head":32,"n_head_kv":8,"head_dim":128,"n_ff":14336}'
write_model qwen3moe '{"arch":"qwen3moe","n_vocab":151936,"n_embd":2048,"n_layer":8,"n_head":32,"n_head_kv":4,"head_dim":128,"n_ff":6144,"experts":128,"experts_used":8,"expert_ff":768}'
write_model gemma3 '{"arch":"gemma3","n_vocab":262144,"n_embd":640,"n_layer":6,"n_head":4,"n_head_kv":1,"head_dim":256,"n_ff":2048,"sliding_window":512,"tied":true}'
write_model glm-dsa '{"arch":"glm-dsa","n_vocab":151936,"n_embd":2048,"n_layer":7,"n_head":64,"n_head_kv":1,"head_dim":576,"n_ff":5632,"context_length":1048576,"mla":{"q_lora_rank":1024,"kv_lora_rank":512,"rope":64,"nope":192,"v_head":256},"indexer":{"heads":32,"head_size":128,"top_k":2048},"dense_lead":3,"experts":32,"experts_used":8,"expert_ff":256,"shared_experts":1,"sigmoid":true,"weights_scale":2.5}'

if ! wait "$build"; then
  build=
  tail -n 60 "$OUT/build.log"
  exit 1
fi
build=
echo "built in $(($(date +%s) - started)) s" | tee "$OUT/build-time.txt"
grep -m 3 -i 'cuda_architectures\|arch' "$OUT/build.log" || true
rigdeck engines list | tee "$OUT/engines.txt"
rigdeck engines list --json >"$OUT/engines.json"
engine=$(python3 -c "import json; b=json.load(open('$OUT/engines.json')); print(b[-1]['id'])")
bin=$(python3 -c "import json; b=json.load(open('$OUT/engines.json')); print(b[-1]['location'])")
bindir=$(dirname "$bin")

step "gguf-py models: the plan beside llama.cpp's dry run, per device (CUDA0 and the host)"
# The gguf-py models planned and dry-run by llama-fit-params of the build above, through
# `rigdeck plan --dry-run`: every layer on the GPU with flash attention on and off, a split
# between the GPU and the host, and (MoE) two GPU-held layers' experts sent to the host by -ot.
dry_run() {
  local model=$1
  shift
  printf '\n### %s: -c %s -np 1 %s\n' "$model" "$CTX" "$*"
  rigdeck plan --rig live --dry-run -- llama-server -m "$work/$model.gguf" -c "$CTX" -np 1 "$@" 2>&1 |
    sed -n '/llama.cpp dry run/,$p'
}
for model in llama qwen3moe gemma3 glm-dsa; do
  dry_run "$model" -ngl 99 -fa on
  dry_run "$model" -ngl 99 -fa off
  dry_run "$model" -ngl 3 -fa on
done >"$OUT/gguf-py-dry-runs.txt"
{
  dry_run qwen3moe -ngl 99 -fa on -ot "$OT"
  # glm-dsa's first three layers are dense: experts of layers 4 and 5.
  dry_run glm-dsa -ngl 99 -fa on -ot 'blk\.(4|5)\.ffn_.*_exps\.=CPU'
} >>"$OUT/gguf-py-dry-runs.txt"
cat "$OUT/gguf-py-dry-runs.txt"

# One model, one profile: the plan, llama.cpp's own dry run, then the real engine measured.
check() {
  local name=$1 model=$2
  shift 2
  step "$name: plan, llama-fit-params, run"
  rigdeck plan "$model" --rig live --ctx "$CTX" | tee "$OUT/plan-$name.txt"
  # -nr: weights llama.cpp repacks for the host CPU (AMX, ARM) are left out of its table otherwise.
  "$bindir/llama-fit-params" -m "$model" -fitp on -nr -c "$CTX" "${FIT_ARGS[@]}" >"$OUT/fit-$name.txt" 2>&1
  grep -E '^(CUDA|Host)' "$OUT/fit-$name.txt" || tail -n 20 "$OUT/fit-$name.txt"
  rigdeck profiles create "$name" --engine "$engine" --model "$model" --ctx "$CTX" "$@" >"$OUT/profile-$name.txt" 2>&1 ||
    { cat "$OUT/profile-$name.txt"; return 1; }
  local idle
  idle=$(used_mib)
  rigdeck run "$name" || { rigdeck logs "$name" --tail 40; return 1; }
  sleep 2
  rigdeck ps
  rigdeck ps --json >"$OUT/ps-$name.json"
  echo "GPU memory used: $idle MiB idle, $(used_mib) MiB with the engine loaded" | tee "$OUT/used-$name.txt"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$OUT/used-$name.txt"
  local port
  port=$(python3 -c "import json; print(next(i['port'] for i in json.load(open('$OUT/ps-$name.json')) if i['name'] == '$name'))")
  curl -s -m 60 "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":8}' >"$OUT/chat-$name.json"
  python3 -c "import json; r=json.load(open('$OUT/chat-$name.json')); print('chat completion answered:', r['usage'], r.get('timings', {}).get('predicted_per_second'), 'tok/s')"
  rigdeck stop "$name"
  rigdeck logs "$name" --tail 400 >"$OUT/engine-$name.log" 2>&1 || true
}

FIT_ARGS=()
check dense "$work/dense.gguf" --from-plan-auto
FIT_ARGS=(-cmoe)
check moe-experts-on-cpu "$work/moe.gguf" --cpu-moe

step "-ot: experts of GPU-held layers in host memory, the CUDA compute buffer beside the plan's"
# Unmeasured so far (README, the -ot paragraph): with every layer on the GPU and the routed
# experts of layers 1 and 2 sent to the host by -ot, llama.cpp's scheduler runs those experts'
# matmuls on the GPU for a micro-batch of at least GGML_OP_OFFLOAD_MIN_BATCH tokens (32 unless
# set), their weights copied into the GPU's compute buffer; below it, or with --no-op-offload,
# on the CPU. The plan replays those layers on the GPU without the copies. This records CUDA0's
# compute buffer as llama-fit-params logs it (its last sched_reserve) at -ub 512 and -ub 16, with
# op offload on and off, beside the plan's CUDA0 compute figure. It states no result: compare.
for ub in 512 16; do
  rigdeck plan --rig live --json -- llama-server -m "$work/moe.gguf" -c "$CTX" -ngl 99 -ub "$ub" -ot "$OT" \
    >"$OUT/plan-ot-ub$ub.json"
  for offload in --op-offload --no-op-offload; do
    "$bindir/llama-fit-params" -m "$work/moe.gguf" -fitp on -nr -v -c "$CTX" -ngl 99 -ub "$ub" -ot "$OT" "$offload" \
      >"$OUT/fit-ot-ub$ub$offload.txt" 2>&1
  done
done
python3 - "$OUT" <<'PY'
import json, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
for ub in (512, 16):
    try:
        report = json.loads((out / f"plan-ot-ub{ub}.json").read_text())["report"]
        gpu = next(d for d in report["plan"]["devices"] if d["spec"]["id"] == {"kind": "gpu", "index": 0})
        planned = f"{gpu['usage']['compute_estimate_bytes'] / 2**20:.2f} MiB"
    except (OSError, KeyError, StopIteration, ValueError) as e:
        planned = f"no plan ({e!r})"
    for offload in ("--op-offload", "--no-op-offload"):
        log = (out / f"fit-ot-ub{ub}{offload}.txt").read_text(errors="replace")
        found = re.findall(r"CUDA0 compute buffer size =\s*([0-9.]+) MiB", log)
        measured = f"{found[-1]} MiB" if found else "not logged"
        print(f"-ot experts on the host, -ub {ub:<3} {offload:<16} CUDA0 compute: llama.cpp {measured:>12}, plan {planned}")
PY

step "planned vs measured"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for ps in sorted(out.glob("ps-*.json")):
    name = ps.stem.removeprefix("ps-")
    for inst in (i for i in json.loads(ps.read_text()) if i["name"] == name):
        planned = sum(p["bytes"] for p in inst["planned_memory"]) / 2**20
        measured = sum(p["bytes"] for p in inst["measured_memory"]) / 2**20
        ratio = f"{measured / planned:.3f}" if planned and measured else "-"
        print(f"{inst['name']:<22} planned {planned:9.0f} MiB  measured (NVML per process) {measured:9.0f} MiB  measured/planned {ratio}")
PY
