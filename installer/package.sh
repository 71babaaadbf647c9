#!/usr/bin/env bash
# Builds Rigdeck's packages from binaries already built (`make package` builds them first):
#   - a .deb and an .rpm through Tauri's bundler (formats that download tools at build time are left out);
#   - a tarball with an install script, for other distributions.
# Each holds `rigdeck` (desktop and headless), `rigdeck-desktop`, the desktop entry and icons, a
# CPU llama.cpp (llama-server, llama-bench, llama-fit-params, llama-perplexity, llama-quantize,
# llama-tokenize) built portably from the pinned,
# verified source, registered by Rigdeck at its first start, and the licences of all of it.
#
# PACKAGE_PROFILE=debug packages the debug build the tests made (the packaging check), release
# otherwise. Packages land in PACKAGE_OUT (default $CARGO_TARGET_DIR/packages).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

profile=${PACKAGE_PROFILE:-release}
target=${CARGO_TARGET_DIR:-$HOME/.cache/rigdeck/target}
export CARGO_TARGET_DIR=$target  # the bundler looks for the binaries there too
out=${PACKAGE_OUT:-$target/packages}
cache=${RIGDECK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rigdeck}
cache=${cache%/}  # spelled as Rigdeck spells it, so the build's recorded paths match the tests'
bin=$target/$profile
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

for binary in rigdeck rigdeck-desktop; do
  if [ ! -x "$bin/$binary" ]; then
    echo "package: $bin/$binary is missing: run \`make build\` (or \`make package\`, which builds it)" >&2
    exit 1
  fi
done

# The engine: built once from the pinned source (verified by sha256 before anything runs) and
# reused afterwards. It is the very build the tests run (the engine build test makes it too:
# $cache/engines/llama.cpp-<pin>-cpu-portable), so whichever comes first builds it and the other
# reuses it. Its registration goes to a database of the packaging step's own, never the user's.
echo "package: the portable CPU llama.cpp (built once, shared with the tests, then reused)"
engine_data=$cache/packaging
RIGDECK_DATA_DIR=$engine_data RIGDECK_CONFIG_DIR=$engine_data/config \
  "$bin/rigdeck" engines build --backend cpu --portable --engines-dir "$cache/engines"
server=$(RIGDECK_DATA_DIR=$engine_data RIGDECK_CONFIG_DIR=$engine_data/config \
  "$bin/rigdeck" engines list --json | python3 -c '
import json, sys
prefix = sys.argv[1] + "/engines/llama.cpp-"
builds = [b for b in json.load(sys.stdin) if b["location"].startswith(prefix) and b["location"].endswith("-cpu-portable/bin/llama-server") and b["status"] == "ready"]
print(max(builds, key=lambda b: b["created_at_ms"])["location"] if builds else "")' "$cache")
if [ -z "$server" ]; then
  echo "package: the portable llama.cpp build is not registered in $engine_data: see the build output above" >&2
  exit 1
fi
engine_dir=$(dirname "$(dirname "$server")")
engine_name=$(basename "$engine_dir")
tree=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["configure_args"]; print(a[a.index("-S")+1])' "$engine_dir/rigdeck-build.json")

# Staging: the files every package carries, laid out as under /usr.
stage=$target/package-stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib/rigdeck/engines/$engine_name/bin" "$stage/share/doc/rigdeck"
install -m 0755 "$bin/rigdeck" "$bin/rigdeck-desktop" "$stage/bin/"
for tool in llama-server llama-bench llama-fit-params llama-perplexity llama-quantize llama-tokenize; do
  install -m 0755 "$engine_dir/bin/$tool" "$stage/lib/rigdeck/engines/$engine_name/bin/"
done
install -m 0644 "$engine_dir/rigdeck-build.json" "$stage/lib/rigdeck/engines/$engine_name/"
if [ "$profile" = release ]; then
  strip "$stage"/bin/* "$stage/lib/rigdeck/engines/$engine_name/bin/"*
fi
python3 installer/licences.py --llama-cpp-tree "$tree" --out "$stage/share/doc/rigdeck/licences"
install -m 0644 LICENSE "$stage/share/doc/rigdeck/LICENSE"

mkdir -p "$out"
rm -f "$out"/*.deb "$out"/*.rpm "$out"/*.tar.gz

# .deb and .rpm: Tauri's bundler packs rigdeck-desktop with its desktop entry and icons; the
# staged files ride along. The libraries the engine links (OpenMP, OpenSSL) are declared too.
# Folders are copied whole by the bundler; the file list stays short (the CLI hands the config
# to cargo through the environment).
config=$target/package-tauri.json
python3 - "$stage" "$config" <<'EOF'
import json, sys
stage, config = sys.argv[1], sys.argv[2]
files = {
    "/usr/bin/rigdeck": f"{stage}/bin/rigdeck",
    "/usr/lib/rigdeck": f"{stage}/lib/rigdeck",
    "/usr/share/doc/rigdeck": f"{stage}/share/doc/rigdeck",
}
with open(config, "w") as f:
    json.dump({"bundle": {"linux": {
        "deb": {"files": files, "depends": ["libgomp1", "libssl3t64 | libssl3"]},
        "rpm": {"files": files, "depends": ["libgomp", "openssl-libs"]},
    }}}, f)
EOF
echo "package: .deb and .rpm (Tauri's bundler)"
debug_flag=()
[ "$profile" = debug ] && debug_flag=(--debug)
(cd src-tauri && "$root/ui/node_modules/.bin/tauri" bundle --ci --no-sign "${debug_flag[@]}" \
  --bundles deb,rpm --config "$config")
cp "$bin"/bundle/deb/*.deb "$bin"/bundle/rpm/*.rpm "$out/"

# The tarball: the same tree, the desktop entry and icons, and the install script.
echo "package: tarball with install script"
name=rigdeck-$version-x86_64-linux
tarball_root=$target/package-tarball/$name
rm -rf "$target/package-tarball"
mkdir -p "$tarball_root"
cp -a "$stage/." "$tarball_root/"
mkdir -p "$tarball_root/share/applications"
install -m 0644 installer/rigdeck-desktop.desktop "$tarball_root/share/applications/"
for size in 32x32 128x128; do
  install -D -m 0644 "src-tauri/icons/$size.png" "$tarball_root/share/icons/hicolor/$size/apps/rigdeck-desktop.png"
done
install -D -m 0644 "src-tauri/icons/128x128@2x.png" "$tarball_root/share/icons/hicolor/128x128@2/apps/rigdeck-desktop.png"
install -m 0755 installer/install.sh "$tarball_root/install.sh"
tar -C "$target/package-tarball" -czf "$out/$name.tar.gz" "$name"

echo "package: done"
for file in "$out"/*; do
  printf '  %s  %s\n' "$(du -h "$file" | cut -f1)" "$file"
done
