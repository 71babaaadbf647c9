#!/usr/bin/env bash
# `rigdeck run REPO:QUANT -m TEXT` on a fresh data folder, as a new user types it: the real
# Gemma 3 270M Q4_K_M served by the local stand-in hub, the bundled (portable CPU) llama-server.
# Prints the seconds from the command to its exit, the daemon's own split (download, placing and
# start, load) and the reply's time to first token as the chat reports it.
#
#   bash tests/bench/first_reply.sh
set -euo pipefail

CACHE=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
RELEASE=$CARGO_TARGET_DIR/release
cargo build -q --release -p rigdeck-server
cargo build -q --release -p rigdeck-hub --example fake_hub
GEMMA=$(bash tests/fixtures/gemma3_270m.sh)
SERVER=$(ls -t "$CACHE"/engines/llama.cpp-*-cpu-portable/bin/llama-server | head -n 1)

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/rigdeck-first-reply.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
REPO=bench/gemma-3-270m-it-GGUF
printf '{"repos":[{"id":"%s","files":[{"path":"gemma-3-270m-it-Q4_K_M.gguf","source":"%s"}]}]}\n' "$REPO" "$GEMMA" >"$WORK/spec.json"
"$RELEASE/examples/fake_hub" "$WORK/spec.json" >"$WORK/hub.url" &
until [ -s "$WORK/hub.url" ]; do sleep 0.2; done
export HF_ENDPOINT=$(head -n 1 "$WORK/hub.url") HF_HUB_CACHE=$WORK/hf HF_TOKEN=
export RIGDECK_CONFIG_DIR=$WORK/config RIGDECK_DATA_DIR=$WORK/data
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export RIGDECK_URL=http://127.0.0.1:$PORT
"$RELEASE/rigdeck" serve --bind "127.0.0.1:$PORT" >"$WORK/serve.log" 2>&1 &
until [ -s "$WORK/config/token" ]; do sleep 0.2; done
"$RELEASE/rigdeck" engines register "$SERVER" >/dev/null

start=$(date +%s.%N)
"$RELEASE/rigdeck" run "$REPO:Q4_K_M" -m "Say hello in one short sentence." --max-tokens 32 >"$WORK/reply.txt" 2>"$WORK/progress.txt"
end=$(date +%s.%N)
cat "$WORK/progress.txt" >&2   # the steps, then the reply's figures (time to first token, tok/s)
python3 - "$start" "$end" "$RIGDECK_URL" "$RIGDECK_CONFIG_DIR/token" "$WORK/reply.txt" <<'PY'
import json, sys, urllib.request
start, end, url, token_file, reply = sys.argv[1:]
token = open(token_file).read().strip()
req = urllib.request.Request(url + "/api/v1/model-runs", headers={"Authorization": "Bearer " + token})
run = json.load(urllib.request.urlopen(req))[-1]
print(f"rigdeck run REPO:Q4_K_M -m TEXT on a fresh data folder: {float(end) - float(start):.1f} s to the end of a 32-token reply")
print(f"  the daemon: {(run['ended_ms'] - run['started_ms']) / 1000:.1f} s from the request to ready ({run['detail']})")
print("  the reply:", open(reply).read().strip()[:200])
PY
