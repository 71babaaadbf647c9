#!/usr/bin/env bash
# The cache is shared both ways with huggingface_hub (from the Python package index): what
# `rigdeck pull` downloads, huggingface_hub finds offline without a warning; what `hf download`
# downloaded, `rigdeck pull` reuses without fetching. Runs against the hub crate's fake hub.
#
#   bash tests/hub/interop.sh DEBUG_DIR     (DEBUG_DIR holds rigdeck and examples/fake_hub)
set -euo pipefail

DEBUG=${1:?usage: interop.sh DEBUG_DIR}
HF_VERSION=${HF_VERSION:-2.4.0}
CACHE=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
VENV=$CACHE/bench/hf-$HF_VERSION
if [ ! -x "$VENV/bin/hf" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "huggingface_hub==$HF_VERSION"
fi

WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
cat >"$WORK/spec.json" <<'JSON'
{"repos":[{"id":"org/Interop-GGUF","files":[
  {"path":"README.md","size":1500,"lfs":false},
  {"path":"Interop-Q4_K_M.gguf","size":3145728},
  {"path":"Q8_0/Interop-Q8_0-00001-of-00002.gguf","size":2097152},
  {"path":"Q8_0/Interop-Q8_0-00002-of-00002.gguf","size":1048583},
  {"path":"mmproj-F16.gguf","size":524288}]}]}
JSON
"$DEBUG/examples/fake_hub" "$WORK/spec.json" >"$WORK/hub.url" &
until [ -s "$WORK/hub.url" ]; do sleep 0.1; done
export HF_ENDPOINT=$(head -n 1 "$WORK/hub.url") HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1
export RIGDECK_CONFIG_DIR=$WORK/config RIGDECK_DATA_DIR=$WORK/data HF_HOME=$WORK/hf-home

echo "interop: huggingface_hub $HF_VERSION reads what rigdeck pull wrote"
HF_HUB_CACHE=$WORK/by-rigdeck "$DEBUG/rigdeck" pull org/Interop-GGUF:Q8_0 >/dev/null
HF_HUB_OFFLINE=1 "$VENV/bin/python" - "$WORK/by-rigdeck" <<'PY'
import hashlib, os, sys
from huggingface_hub import hf_hub_download, scan_cache_dir
cache = sys.argv[1]
for name in ["Q8_0/Interop-Q8_0-00001-of-00002.gguf", "Q8_0/Interop-Q8_0-00002-of-00002.gguf"]:
    path = hf_hub_download("org/Interop-GGUF", name, cache_dir=cache, local_files_only=True)
    blob = os.path.basename(os.path.realpath(path))
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert digest == blob, f"{name}: content {digest} under blob {blob}"
info = scan_cache_dir(cache)
assert not info.warnings, info.warnings
[repo] = info.repos
[revision] = repo.revisions
assert repo.repo_id == "org/Interop-GGUF" and revision.refs == {"main"}, (repo, revision)
assert revision.nb_files == 2, revision
print(f"  ok: {repo.repo_id} at {revision.commit_hash[:12]} (refs: main), 2 files, no warnings")
PY

echo "interop: rigdeck pull reuses what hf download wrote"
"$VENV/bin/hf" download org/Interop-GGUF Interop-Q4_K_M.gguf --cache-dir "$WORK/by-hf" >/dev/null
out=$(HF_HUB_CACHE=$WORK/by-hf "$DEBUG/rigdeck" pull org/Interop-GGUF:Q4_K_M)
echo "$out" | grep -q "1 file(s) verified (1 already there)" || { echo "$out"; exit 1; }
echo "  ok: $(echo "$out" | head -n 1)"
