#!/usr/bin/env bash
# A Python with what the pinned llama.cpp tree's gguf-py imports (numpy, PyYAML), in a venv in the
# cache; created on first use, then reused. Prints the interpreter's path.
set -euo pipefail
cache="${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}"
venv="$cache/venvs/gguf-py"
if ! "$venv/bin/python" -c 'import numpy, yaml' 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q numpy pyyaml >&2
fi
echo "$venv/bin/python"
