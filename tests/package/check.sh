#!/usr/bin/env bash
# The packaging check (`make test-package`): builds the packages from the test build, then as a
# user would:
#   - installs the .deb (dpkg -i as root; elsewhere unpacked into a throwaway root), runs the
#     installed `rigdeck gpus --json` against the NVML test library, starts `rigdeck serve`, finds
#     the engine the package ships registered, chats with the tiny model through it (profile, run,
#     chat), installs the same package over itself, removes it and checks the user's data stayed;
#   - lists the .rpm's files (where `rpm` is installed) and checks they match;
#   - installs the tarball with its script into a prefix, runs it, uninstalls, checks the data.
# Prints the time from `dpkg -i` to the dashboard being served with the engine ready.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
source tests/package/dashboard.sh
target=${CARGO_TARGET_DIR:-$HOME/.cache/rigdeck/target}
tiny=${RIGDECK_TINY_MODEL:?set RIGDECK_TINY_MODEL to the tiny test model (make test-package does)}
export RIGDECK_NVML_LIBRARY=$target/debug/libnvml_double.so
export RIGDECK_NVML_DOUBLE_RIG=$root/tests/fixtures/rigs/4x3090.json
unset RIGDECK_PACKAGED_ENGINES RIGDECK_DATA_DIR RIGDECK_CONFIG_DIR RIGDECK_URL

work=$(mktemp -d)
serve_pid=
installed_deb=false
cleanup() {
  local status=$?
  if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null || true; fi
  if $installed_deb; then dpkg -r rigdeck >/dev/null 2>&1 || true; fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
fail() { echo "packaging check: $*" >&2; exit 1; }

echo "packaging check: building the packages (debug build; \`make package\` ships release)"
PACKAGE_PROFILE=debug PACKAGE_OUT=$work/packages bash installer/package.sh
deb=$(ls "$work"/packages/*.deb)
rpm_file=$(ls "$work"/packages/*.rpm)
tarball=$(ls "$work"/packages/*.tar.gz)

# A user of their own: data and config under this HOME, nothing of the machine's.
user_vars=(HOME="$work/home" XDG_DATA_HOME= XDG_CONFIG_HOME= XDG_CACHE_HOME=)
user_env() { env "${user_vars[@]}" "$@"; }

# --- the .deb -------------------------------------------------------------------------------
started=$(date +%s.%N)
if [ "$(id -u)" -eq 0 ] && command -v dpkg >/dev/null; then
  dpkg -i "$deb" >/dev/null || fail "dpkg -i $deb failed (see above)"
  installed_deb=true
  prefix=/usr
else
  echo "packaging check: not root: unpacking the .deb into a throwaway root instead of dpkg -i"
  dpkg-deb -x "$deb" "$work/root"
  prefix=$work/root/usr
fi
rigdeck=$prefix/bin/rigdeck
[ -x "$prefix/bin/rigdeck-desktop" ] || fail "the package has no rigdeck-desktop"
[ -f "$prefix/share/applications/Rigdeck.desktop" ] || fail "the package has no desktop entry"
[ -f "$prefix/share/doc/rigdeck/licences/THIRD-PARTY-RUST.md" ] || fail "the package has no licences"

user_env "$rigdeck" gpus --json > "$work/gpus.json"
python3 - "$work/gpus.json" <<'EOF' || fail "the installed 'rigdeck gpus --json' did not list the four GPUs of the test rig"
import json, sys
gpus = json.load(open(sys.argv[1]))
gpus = gpus["gpus"] if isinstance(gpus, dict) else gpus
assert len(gpus) == 4, gpus
EOF

port=$(free_port)
url=http://127.0.0.1:$port
# Started with `env` itself in the background, not through the shell function: a function in
# the background runs in a subshell, and killing that subshell would leave the daemon running.
env "${user_vars[@]}" "$rigdeck" serve --bind "127.0.0.1:$port" > "$work/serve.log" 2>&1 &
serve_pid=$!
token_file=$work/home/.config/rigdeck/token
ready=false
for _ in $(seq 1 300); do
  if dashboard_ready "$url" "$token_file"; then
    ready=true
    break
  fi
  sleep 0.1
done
$ready || { cat "$work/serve.log" >&2; fail "the installed daemon did not serve the dashboard with the shipped engine within 30 s"; }
elapsed=$(python3 -c "import time,sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$started")
echo "packaging check: install to dashboard served with the engine ready: ${elapsed} s"

engine=$(user_env "$rigdeck" engines list --json | python3 -c '
import json, sys
builds = [b for b in json.load(sys.stdin) if b["source"] == "packaged" and b["status"] == "ready"]
print(builds[0]["id"] if builds else "")')
[ -n "$engine" ] || fail "no packaged engine registered"
grep -q "\"$prefix/lib/rigdeck/engines/" <<< "$(user_env "$rigdeck" engines list --json)" || fail "the packaged engine is not the one under $prefix/lib/rigdeck"

export RIGDECK_URL=$url
user_env "$rigdeck" profiles create tiny --engine "$engine" --model "$tiny" --ctx 512 >/dev/null
user_env "$rigdeck" run tiny >/dev/null || { cat "$work/serve.log" >&2; fail "the shipped engine did not start the tiny model"; }
reply=$(user_env "$rigdeck" chat tiny --message "Say hello." 2>&1) || fail "chat through the shipped engine failed: $reply"
[ -n "$reply" ] || fail "the shipped engine's reply was empty"
echo "packaging check: chat through the shipped llama-server answered"
user_env "$rigdeck" stop tiny >/dev/null
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=
if pgrep -f "^$rigdeck serve" >/dev/null; then fail "the installed 'rigdeck serve' still runs after it was stopped"; fi

data=$work/home/.local/share/rigdeck/rigdeck.db
[ -f "$data" ] || fail "no database at $data"
if $installed_deb; then
  # Installing over an installed version keeps the data and the engine's id.
  dpkg -i "$deb" >/dev/null || fail "installing the package over itself failed"
  again=$(user_env "$rigdeck" engines list --json | python3 -c '
import json, sys
print([b["id"] for b in json.load(sys.stdin) if b["source"] == "packaged"])')
  [ "$again" = "[$engine]" ] || fail "after reinstalling, the packaged engines are $again, not [$engine]"
  dpkg -r rigdeck >/dev/null || fail "dpkg -r rigdeck failed"
  installed_deb=false
  [ ! -e /usr/bin/rigdeck ] || fail "/usr/bin/rigdeck is still there after dpkg -r"
  [ ! -e /usr/lib/rigdeck ] || fail "/usr/lib/rigdeck is still there after dpkg -r"
fi
[ -f "$data" ] || fail "removing the package took the user's database"
# Read from the database itself: the daemon is stopped, and the CLI talks to a running one.
python3 - "$data" <<'EOF' || fail "the profile did not survive the package's removal"
import sqlite3, sys
names = [row[0] for row in sqlite3.connect(sys.argv[1]).execute("SELECT name FROM launch_profiles")]
assert "tiny" in names, names
EOF
echo "packaging check: .deb installed, used, reinstalled and removed; the user's data stayed"

# --- the .rpm -------------------------------------------------------------------------------
if command -v rpm >/dev/null; then
  files=$(rpm -qpl "$rpm_file" 2>/dev/null)
  for wanted in /usr/bin/rigdeck /usr/bin/rigdeck-desktop /usr/share/doc/rigdeck/licences/THIRD-PARTY-RUST.md; do
    grep -qxF "$wanted" <<< "$files" || fail "the .rpm lacks $wanted"
  done
  grep -q '^/usr/lib/rigdeck/engines/.*/bin/llama-server$' <<< "$files" || fail "the .rpm lacks the engine"
  echo "packaging check: .rpm holds the binaries, the engine and the licences"
else
  echo "packaging check: rpm is not installed: the .rpm's contents were not listed"
fi

# --- the tarball ----------------------------------------------------------------------------
tar -C "$work" -xzf "$tarball"
unpacked=$(ls -d "$work"/rigdeck-*-x86_64-linux)
prefix=$work/prefix
user_env "$unpacked/install.sh" --prefix "$prefix" >/dev/null
grep -q "\"$prefix/lib/rigdeck/engines/" <<< "$(user_env "$prefix/bin/rigdeck" engines list --json)" \
  || fail "the tarball's engine is not registered from $prefix"
grep -qx "Exec=$prefix/bin/rigdeck-desktop" "$prefix/share/applications/rigdeck-desktop.desktop" \
  || fail "the installed desktop entry does not start $prefix/bin/rigdeck-desktop"
user_env "$unpacked/install.sh" --prefix "$prefix" >/dev/null || fail "installing the tarball over itself failed"
user_env "$unpacked/install.sh" --uninstall --prefix "$prefix" >/dev/null
[ ! -e "$prefix/bin/rigdeck" ] && [ ! -e "$prefix/lib/rigdeck" ] || fail "install.sh --uninstall left files in $prefix"
[ -f "$data" ] || fail "install.sh --uninstall took the user's database"
if user_env "$unpacked/install.sh" --uninstall --prefix "$prefix" 2> "$work/again.txt"; then
  fail "uninstalling twice succeeded"
fi
grep -q "no Rigdeck installed in $prefix" "$work/again.txt" || fail "uninstalling twice said: $(cat "$work/again.txt")"
echo "packaging check: tarball installed, reinstalled and uninstalled; the user's data stayed"

# A machine that lacks a library: the list of what to install, and nothing copied.
mkdir -p "$work/lib"
echo 'int gone(void) { return 0; }' > "$work/lib/gone.c"
printf 'int gone(void);\nint main(void) { return gone(); }\n' > "$work/lib/main.c"
gcc -shared -fPIC -o "$work/lib/libgone.so" "$work/lib/gone.c"
gcc -o "$unpacked/bin/rigdeck" "$work/lib/main.c" -L"$work/lib" -lgone
if user_env "$unpacked/install.sh" --prefix "$prefix" 2> "$work/missing.txt"; then
  fail "install.sh installed a rigdeck whose library is missing"
fi
grep -q "libgone.so" "$work/missing.txt" || fail "install.sh did not name the missing library: $(cat "$work/missing.txt")"
[ ! -e "$prefix/bin/rigdeck" ] && [ ! -e "$prefix/lib/rigdeck" ] || fail "a refused install left files in $prefix"
echo "packaging check: a missing library is named and nothing is installed"
echo "packaging check: passed"
