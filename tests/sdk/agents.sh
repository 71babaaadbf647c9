#!/usr/bin/env bash
# The gateway as coding agents call it (`make test-sdk`): the official `openai` and `anthropic`
# Python SDKs (pinned, from the Python package index, in a virtual environment outside the
# checkout) against a real `rigdeck serve` with real llama-servers (the cached CPU build) on the
# tiny test model. Two profiles: one started by the test, one started on demand by the gateway
# with a 2 s idle timeout. For each, back to back: OpenAI chat completions and Anthropic messages,
# streamed and not, in an order where every kind of call follows every other (so many a request
# goes out right after a streamed reply, when llama-server has just closed its connection), and
# some after a pause past the idle timeout (the on-demand model is stopped for idleness and loaded
# again by the next call). The SDKs' own retries are off (max_retries=0): every call must succeed
# by itself. Streamed calls must carry text deltas (and OpenAI's usage chunk, Anthropic's
# message_start), whole ones their usage; the engine samples (see GREEDY). Prints the calls by
# kind, the failures with their messages and the slowest call; exits non-zero on any failure.
#
#   bash tests/sdk/agents.sh                 # after `cargo build -p rigdeck-server -p rigdeck-nvml-double`
#                                            # and `make tiny-model`
#   CALLS=80 bash tests/sdk/agents.sh        # calls per model (default 40)
#   KEEP=1 bash tests/sdk/agents.sh          # keep the work folder (the daemon's log)
#   GREEDY=1 bash tests/sdk/agents.sh        # greedy decoding: the same answers on every run
# Environment: RIGDECK_BIN, RIGDECK_TINY_MODEL, RIGDECK_LLAMA_SERVER, RIGDECK_NVML_LIBRARY override
# the defaults below (the debug build, tests/artifacts/tiny.gguf, the cached CPU llama-server;
# `make test-sdk` passes the same ones).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OPENAI_VERSION=${OPENAI_VERSION:-3.57.0}
ANTHROPIC_VERSION=${ANTHROPIC_VERSION:-2.14.0}
CACHE=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
TARGET=${CARGO_TARGET_DIR:-$CACHE/target}
RIGDECK=${RIGDECK_BIN:-$TARGET/debug/rigdeck}
NVML=${RIGDECK_NVML_LIBRARY:-$TARGET/debug/libnvml_double.so}
TINY=${RIGDECK_TINY_MODEL:-$ROOT/tests/artifacts/tiny.gguf}
# The portable CPU build that test-rust makes (an older plain CPU build where that is all there is).
LLAMA_SERVER=${RIGDECK_LLAMA_SERVER:-$(ls -t "$CACHE"/engines/llama.cpp-*-cpu-portable/bin/llama-server \
  "$CACHE"/engines/llama.cpp-*-cpu/bin/llama-server 2>/dev/null | head -n 1 || true)}
CALLS=${CALLS:-40}

fail() { echo "sdk agents: $*" >&2; exit 1; }
[ -x "$RIGDECK" ] || fail "no rigdeck at $RIGDECK: cargo build -p rigdeck-server -p rigdeck-nvml-double"
[ -f "$NVML" ] || fail "no NVML test library at $NVML: cargo build -p rigdeck-nvml-double"
[ -f "$TINY" ] || fail "no tiny model at $TINY: make tiny-model"
[ -n "$LLAMA_SERVER" ] && [ -x "$LLAMA_SERVER" ] \
  || fail "no cached CPU llama-server in $CACHE/engines (make test-rust builds it; or set RIGDECK_LLAMA_SERVER)"

# The SDKs, pinned, in their own environment outside the checkout; reused while it holds them.
VENV=$CACHE/venvs/sdk
have_sdks() {
  "$VENV/bin/python" - "$OPENAI_VERSION" "$ANTHROPIC_VERSION" 2>/dev/null <<'PY'
import sys, openai, anthropic
sys.exit(0 if (openai.__version__, anthropic.__version__) == (sys.argv[1], sys.argv[2]) else 1)
PY
}
if ! have_sdks; then
  echo "sdk agents: installing openai $OPENAI_VERSION and anthropic $ANTHROPIC_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || fail "python3 -m venv failed (python3-venv is installed by installer/setup.sh)"
  "$VENV/bin/pip" install -q "openai==$OPENAI_VERSION" "anthropic==$ANTHROPIC_VERSION"
  have_sdks || fail "the SDKs in $VENV are not openai $OPENAI_VERSION and anthropic $ANTHROPIC_VERSION"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rigdeck-sdk-agents.XXXXXX")
DAEMON_PID=
CLIENT_PID=
cleanup() {
  local status=$?
  if [ -n "$CLIENT_PID" ]; then kill "$CLIENT_PID" 2>/dev/null || true; wait "$CLIENT_PID" 2>/dev/null || true; fi
  # The daemon stops the engines it started when it gets SIGTERM; a daemon that does not stop
  # within 30 s is killed, and so are engines it left behind (found by their own work folder).
  if [ -n "$DAEMON_PID" ]; then
    kill "$DAEMON_PID" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  local left
  left=$(pgrep -f -- "$WORK" || true)
  if [ -n "$left" ]; then
    echo "sdk agents: engines left running after the daemon stopped: $left (killed)" >&2
    kill -9 $left 2>/dev/null || true
    [ "$status" -ne 0 ] || status=1
  fi
  if [ "$status" -ne 0 ] && [ -f "$WORK/daemon.log" ]; then
    echo "sdk agents: the daemon's log (last 40 lines):" >&2
    tail -n 40 "$WORK/daemon.log" >&2
  fi
  if [ -n "${KEEP:-}" ]; then echo "sdk agents: kept $WORK"; else rm -rf "$WORK"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A throwaway Rigdeck: its own config, data and cache folders, the 2× RTX 5060 Ti test rig.
export RIGDECK_CONFIG_DIR=$WORK/config RIGDECK_DATA_DIR=$WORK/data RIGDECK_CACHE_DIR=$WORK/cache
export XDG_CONFIG_HOME=$WORK/xdg/config XDG_DATA_HOME=$WORK/xdg/data
export RIGDECK_NVML_LIBRARY=$NVML RIGDECK_NVML_DOUBLE_RIG=$ROOT/tests/fixtures/rigs/2x5060ti.json
unset RIGDECK_PACKAGED_ENGINES
mkdir -p "$RIGDECK_CONFIG_DIR" "$RIGDECK_DATA_DIR" "$WORK/models"
printf 'model_folders = ["%s"]\n' "$WORK/models" >"$RIGDECK_CONFIG_DIR/settings.toml"
# The model under the work folder too, so every engine's command line names the work folder.
ln -s "$TINY" "$WORK/models/tiny.gguf"

"$RIGDECK" engines register "$LLAMA_SERVER" --backend cpu >"$WORK/register.log" 2>&1 \
  || { cat "$WORK/register.log" >&2; fail "engines register $LLAMA_SERVER failed"; }
ENGINE_ID=$("$RIGDECK" engines list --json | "$VENV/bin/python" -c '
import json, sys
print(next(b["id"] for b in json.load(sys.stdin) if b["location"] == sys.argv[1]))' "$LLAMA_SERVER")

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export RIGDECK_URL=http://127.0.0.1:$PORT
RUST_LOG=${RUST_LOG:-info} "$RIGDECK" serve --bind "127.0.0.1:$PORT" >"$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
UP=
for _ in $(seq 300); do
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "rigdeck serve exited at start"
  if [ -s "$RIGDECK_CONFIG_DIR/token" ] && curl -sf -o /dev/null \
    -H "Authorization: Bearer $(cat "$RIGDECK_CONFIG_DIR/token")" "$RIGDECK_URL/api/v1/status"; then
    UP=1
    break
  fi
  sleep 0.1
done
[ -n "$UP" ] || fail "the daemon did not answer within 30 s"

# Each engine has one slot with the whole context, and one thread (two engines on two cores).
"$RIGDECK" profiles create agent --engine "$ENGINE_ID" --model "$WORK/models/tiny.gguf" --ctx 512 \
  --np 1 --threads 1 >"$WORK/profiles.log" 2>&1 \
  || { cat "$WORK/profiles.log" >&2; fail "creating the profile agent failed"; }
"$RIGDECK" profiles create agent-od --engine "$ENGINE_ID" --model "$WORK/models/tiny.gguf" --ctx 512 \
  --np 1 --threads 1 --on-demand --idle-ttl 2 >>"$WORK/profiles.log" 2>&1 \
  || { cat "$WORK/profiles.log" >&2; fail "creating the profiles failed"; }
"$RIGDECK" run agent >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log" >&2; fail "rigdeck run agent failed"; }
KEY=$("$RIGDECK" keys create sdk-agents --json | "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["secret"])')
[ -n "$KEY" ] || fail "no API key"

echo "sdk agents: openai $OPENAI_VERSION and anthropic $ANTHROPIC_VERSION against rigdeck serve on" \
  "$RIGDECK_URL, llama-server $(basename "$(dirname "$(dirname "$LLAMA_SERVER")")"), $CALLS calls per model"
# In the background, so a signal to this script stops the clients and everything else at once.
SDK_BASE=$RIGDECK_URL SDK_KEY=$KEY SDK_ADMIN_TOKEN=$(cat "$RIGDECK_CONFIG_DIR/token") SDK_CALLS=$CALLS SDK_GREEDY=${GREEDY:-0} \
  "$VENV/bin/python" "$ROOT/tests/sdk/agents.py" agent=started agent-od=on-demand &
CLIENT_PID=$!
wait "$CLIENT_PID"
