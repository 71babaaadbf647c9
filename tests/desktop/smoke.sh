#!/usr/bin/env bash
# Desktop smoke test: runs the real `rigdeck-desktop` window under Xvfb and checks, as a user would
# see it, that the window loads the UI and signs in (the UI's WebSocket shows up in
# /api/v1/status), takes a screenshot, checks that a second launch only brings the window back,
# that closing the window with "keep running in the background" on hides it and keeps serving,
# that closing it with the setting off stops the server and the process, and that with
# `--remote URL` and the token the window shows another rig's `rigdeck serve` (started here on
# loopback with its own folders, from the `rigdeck` binary beside rigdeck-desktop).
#
# Usage: bash tests/desktop/smoke.sh PATH/TO/rigdeck-desktop ARTEFACT_DIR
#
# Needs: Xvfb, xdpyinfo (x11-utils), ImageMagick (import, identify), curl, cc and libX11 headers
# (libx11-dev, pulled in by libgtk-3-dev) for the small close helper.
# Keeps RIGDECK_NVML_LIBRARY / RIGDECK_NVML_DOUBLE_RIG when set (the NVML test double and a rig).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 PATH/TO/rigdeck-desktop ARTEFACT_DIR" >&2
    exit 2
fi
BIN=$(realpath "$1")
mkdir -p "$2"
ART=$(realpath "$2")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -x "$BIN" ] || { echo "desktop smoke: $BIN is not an executable" >&2; exit 2; }
for tool in Xvfb xdpyinfo import identify curl cc; do
    command -v "$tool" >/dev/null || { echo "desktop smoke: needs $tool on PATH" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/rigdeck-desktop-smoke.XXXXXX)
APP_LOG="$ART/app.log"
XVFB_PID=""
APP_PID=""
REMOTE_PID=""
: >"$APP_LOG"

cleanup() {
    # Only the processes this script started, by their ids.
    if [ -n "$APP_PID" ] && kill -0 "$APP_PID" 2>/dev/null; then
        kill -TERM "$APP_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$APP_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$APP_PID" 2>/dev/null || true
    fi
    if [ -n "$REMOTE_PID" ]; then
        kill -TERM "$REMOTE_PID" 2>/dev/null || true
        wait "$REMOTE_PID" 2>/dev/null || true
    fi
    if [ -n "$XVFB_PID" ]; then
        kill -TERM "$XVFB_PID" 2>/dev/null || true
        wait "$XVFB_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
    echo "desktop smoke: FAILED: $*" >&2
    # What the screen showed at the time, to see why.
    if [ -n "$XVFB_PID" ] && [ -n "${DISPLAY:-}" ] && import -window root -display "$DISPLAY" "$ART/failure.png" 2>/dev/null; then
        echo "desktop smoke: screen at failure saved to $ART/failure.png" >&2
    fi
    if [ -s "$APP_LOG" ]; then
        echo "--- $APP_LOG (last 60 lines) ---" >&2
        tail -n 60 "$APP_LOG" >&2
        echo "---" >&2
    fi
    echo "desktop smoke: 0 passed, 1 failed"
    exit 1
}

step() { echo "desktop smoke: $*"; }

# --- 1. Private folders, so the test never touches the user's own Rigdeck or WebKit data.
export RIGDECK_CONFIG_DIR="$WORK/config" RIGDECK_DATA_DIR="$WORK/data"
export XDG_RUNTIME_DIR="$WORK/runtime" XDG_DATA_HOME="$WORK/xdg-data" XDG_CACHE_HOME="$WORK/xdg-cache"
export XDG_CONFIG_HOME="$WORK/xdg-config"
mkdir -p "$RIGDECK_CONFIG_DIR" "$RIGDECK_DATA_DIR" "$XDG_RUNTIME_DIR" "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME"
chmod 0700 "$XDG_RUNTIME_DIR"
if [ -n "${RIGDECK_NVML_LIBRARY:-}" ] && [ -n "${RIGDECK_NVML_DOUBLE_RIG:-}" ]; then
    step "using the NVML double $RIGDECK_NVML_LIBRARY with $(basename "$RIGDECK_NVML_DOUBLE_RIG")"
else
    unset RIGDECK_NVML_LIBRARY RIGDECK_NVML_DOUBLE_RIG
fi

# The close helper (see x11_window.c for why xdotool and wmctrl do not do).
cc -O -o "$WORK/x11_window" "$HERE/x11_window.c" -lX11 || fail "cannot build the X11 helper (needs libx11-dev)"

# --- 2. A private X server on a free display: -displayfd lets Xvfb pick the number and tells it
# once it accepts connections.
Xvfb -displayfd 3 -screen 0 1400x900x24 -nolisten tcp 3>"$WORK/display" >"$ART/xvfb.log" 2>&1 &
XVFB_PID=$!
for _ in $(seq 100); do
    [ -s "$WORK/display" ] && break
    kill -0 "$XVFB_PID" 2>/dev/null || fail "Xvfb exited (see $ART/xvfb.log)"
    sleep 0.1
done
[ -s "$WORK/display" ] || fail "Xvfb did not start within 10 s"
export DISPLAY=":$(tr -dc '0-9' <"$WORK/display")"
for _ in $(seq 50); do
    xdpyinfo >/dev/null 2>&1 && break
    sleep 0.1
done
xdpyinfo >/dev/null 2>&1 || fail "Xvfb on $DISPLAY does not accept connections"
step "Xvfb on $DISPLAY"

# Under Xvfb as root, WebKitGTK 2.50 (Debian 12) draws without any special setting: no software-GL,
# compositing, DMA-BUF or sandbox switches are needed, so the window runs as a user's would. A
# caller on another machine may still export WEBKIT_DISABLE_DMABUF_RENDERER=1,
# WEBKIT_DISABLE_COMPOSITING_MODE=1 or LIBGL_ALWAYS_SOFTWARE=1 (they are passed through) if the
# screenshot comes out blank. Here: X11 only, and no session bus, so skip the accessibility bus.
unset WAYLAND_DISPLAY DBUS_SESSION_BUS_ADDRESS
export GDK_BACKEND=x11
export NO_AT_BRIDGE=1

# Helpers ------------------------------------------------------------------------------------
status_json() { curl -fsS --max-time 5 -H "Authorization: Bearer $TOKEN" "$URL/api/v1/status"; }
ws_clients() { status_json 2>/dev/null | sed -n 's/.*"ws_clients": *\([0-9][0-9]*\).*/\1/p'; }
window_state() { "$WORK/x11_window" state Rigdeck; }
set_keep_running() {
    curl -fsS --max-time 5 -X PUT -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
        -d "{\"keep_running_in_background\": $1}" "$URL/api/v1/settings" >/dev/null \
        || fail "cannot set keep_running_in_background=$1 through the API"
}
# TCP sockets that process $1 listens on (socket inodes of /proc/PID/fd in state 0A = LISTEN).
listeners_of() {
    local inodes
    inodes=$(find "/proc/$1/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null | tr -dc '0-9\n' || true)
    [ -n "$inodes" ] || { echo 0; return; }
    awk '$4 == "0A" { print $10 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -Fxc -f <(echo "$inodes") || true
}
# rigdeck-desktop processes of this test (same binary, same private config folder).
our_instances() {
    local pid count=0
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$BIN" ] || continue
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -Fxq "RIGDECK_CONFIG_DIR=$RIGDECK_CONFIG_DIR" || continue
        count=$((count + 1))
    done
    echo "$count"
}
# Processes this test's app left: rigdeck-desktop itself, or WebKit's helper processes, which
# inherit its environment (and so our private RIGDECK_CONFIG_DIR).
leftovers() {
    local pid exe found=""
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
        case "$exe" in "$BIN" | */webkit2gtk-*) ;; *) continue ;; esac
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -Fxq "RIGDECK_CONFIG_DIR=$RIGDECK_CONFIG_DIR" || continue
        found="$found $pid:$(basename "$exe")"
    done
    echo "${found# }"
}
wait_for_exit() { # PID SECONDS
    local i
    for i in $(seq $(($2 * 10))); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# --- 3. Start the app and wait until the window has signed in.
"$BIN" >>"$APP_LOG" 2>&1 &
APP_PID=$!
URL=""
for _ in $(seq 600); do
    URL=$(sed -n 's/^Rigdeck desktop: serving on \(http[^ ]*\)$/\1/p' "$APP_LOG" | head -n 1)
    [ -n "$URL" ] && break
    kill -0 "$APP_PID" 2>/dev/null || fail "rigdeck-desktop exited before serving"
    sleep 0.1
done
[ -n "$URL" ] || fail "no 'Rigdeck desktop: serving on' line within 60 s"
TOKEN=$(tr -d '[:space:]' <"$RIGDECK_CONFIG_DIR/token") || fail "no token in $RIGDECK_CONFIG_DIR/token"
step "serving on $URL (pid $APP_PID)"

CLIENTS=0
for _ in $(seq 120); do
    CLIENTS=$(ws_clients || true)
    [ "${CLIENTS:-0}" -ge 1 ] && break
    kill -0 "$APP_PID" 2>/dev/null || fail "rigdeck-desktop exited while the window was loading"
    sleep 0.5
done
if [ "${CLIENTS:-0}" -lt 1 ]; then
    PAGE=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/" || true)
    if [ "$PAGE" = 503 ]; then
        fail "the server has no web UI embedded (GET / answers 503): build ui/ (npm run build) before the Rust build"
    fi
    fail "the window did not open the UI's WebSocket within 60 s (ws_clients=${CLIENTS:-?}, GET / answers $PAGE)"
fi
[ "$(window_state)" = viewable ] || fail "no visible window titled Rigdeck"
step "window signed in: ws_clients=$CLIENTS"

# --- 4. Screenshot, once the UI has had a moment to draw the first telemetry.
sleep 4
SHOT="$ART/desktop.png"
import -window root -display "$DISPLAY" "$SHOT" || fail "import could not take a screenshot"
COLOURS=$(identify -format '%k' "$SHOT")
[ "$COLOURS" -gt 20 ] || fail "the screenshot is blank ($COLOURS colours): the page did not render"
step "screenshot saved to $SHOT ($COLOURS colours)"

# --- 5. A second launch must only bring the first window back.
SECOND_LOG="$ART/second-instance.log"
START=$SECONDS
timeout 30 "$BIN" >"$SECOND_LOG" 2>&1 || fail "the second rigdeck-desktop failed (exit $?): $(cat "$SECOND_LOG")"
grep -q "Rigdeck is already open; brought its window to the front" "$SECOND_LOG" \
    || fail "the second rigdeck-desktop did not defer to the first: $(cat "$SECOND_LOG")"
! grep -q "serving on" "$SECOND_LOG" || fail "the second rigdeck-desktop started its own server"
kill -0 "$APP_PID" 2>/dev/null || fail "the first rigdeck-desktop exited after the second launch"
status_json >/dev/null || fail "the first server stopped answering after the second launch"
[ "$(our_instances)" -eq 1 ] || fail "expected 1 rigdeck-desktop process, found $(our_instances)"
[ "$(listeners_of "$APP_PID")" -eq 1 ] || fail "expected 1 listening socket, found $(listeners_of "$APP_PID")"
step "second launch deferred to the first in $((SECONDS - START)) s; one server listening"

# --- 6a. Close with "keep running in the background" on: the window hides, the server stays.
set_keep_running true
"$WORK/x11_window" close Rigdeck >/dev/null || fail "cannot send the close request to the window"
for _ in $(seq 50); do [ "$(window_state)" = viewable ] || break; sleep 0.1; done
[ "$(window_state)" != viewable ] || fail "the window stayed visible after closing with keep-running on"
sleep 1
kill -0 "$APP_PID" 2>/dev/null || fail "rigdeck-desktop exited although keep-running was on"
status_json >/dev/null || fail "the server stopped although keep-running was on"
step "closed with keep-running on: window hidden, still serving"

# A second launch reopens the hidden window.
timeout 30 "$BIN" >"$SECOND_LOG" 2>&1 || fail "the reopening rigdeck-desktop failed: $(cat "$SECOND_LOG")"
for _ in $(seq 50); do [ "$(window_state)" = viewable ] && break; sleep 0.1; done
[ "$(window_state)" = viewable ] || fail "a second launch did not bring the hidden window back"
step "a second launch brought the hidden window back"

# --- 6b. Close with the setting off: the server stops and the process exits.
set_keep_running false
"$WORK/x11_window" close Rigdeck >/dev/null || fail "cannot send the close request to the window"
wait_for_exit "$APP_PID" 15 || fail "rigdeck-desktop still runs 15 s after its window was closed"
CODE=0
wait "$APP_PID" || CODE=$?
APP_PID=""
[ "$CODE" -eq 0 ] || fail "rigdeck-desktop exited with status $CODE after its window was closed"
if curl -sS --max-time 3 -o /dev/null "$URL/api/v1/status" 2>/dev/null; then
    fail "something still listens on $URL after the window was closed"
fi
for _ in $(seq 50); do [ -z "$(leftovers)" ] && break; sleep 0.1; done
[ -z "$(leftovers)" ] || fail "processes left behind after closing: $(leftovers)"
step "closed with keep-running off: process exited 0, port closed"

# --- 6c. SIGTERM stops a running app cleanly too.
: >"$APP_LOG.sigterm"
"$BIN" >>"$APP_LOG.sigterm" 2>&1 &
APP_PID=$!
URL2=""
for _ in $(seq 600); do
    URL2=$(sed -n 's/^Rigdeck desktop: serving on \(http[^ ]*\)$/\1/p' "$APP_LOG.sigterm" | head -n 1)
    [ -n "$URL2" ] && break
    kill -0 "$APP_PID" 2>/dev/null || { cat "$APP_LOG.sigterm" >>"$APP_LOG"; fail "the relaunched rigdeck-desktop exited"; }
    sleep 0.1
done
[ -n "$URL2" ] || fail "the relaunched rigdeck-desktop did not serve within 60 s"
kill -TERM "$APP_PID"
wait_for_exit "$APP_PID" 15 || fail "rigdeck-desktop still runs 15 s after SIGTERM"
CODE=0
wait "$APP_PID" || CODE=$?
APP_PID=""
[ "$CODE" -eq 0 ] || fail "rigdeck-desktop exited with status $CODE after SIGTERM"
if curl -sS --max-time 3 -o /dev/null "$URL2/api/v1/status" 2>/dev/null; then
    fail "something still listens on $URL2 after SIGTERM"
fi
cat "$APP_LOG.sigterm" >>"$APP_LOG" && rm -f "$APP_LOG.sigterm"
for _ in $(seq 50); do [ -z "$(leftovers)" ] && break; sleep 0.1; done
[ -z "$(leftovers)" ] || fail "processes left behind after SIGTERM: $(leftovers)"
step "SIGTERM: process exited 0, port closed"

# --- 7. A remote rig: the window shows another machine's `rigdeck serve` (one on loopback here,
# with its own folders), signed in with that rig's token.
SERVE="$(dirname "$BIN")/rigdeck"
[ -x "$SERVE" ] || fail "no rigdeck binary beside $BIN for the remote phase"
mkdir -p "$WORK/remote/config" "$WORK/remote/data"
RIGDECK_CONFIG_DIR="$WORK/remote/config" RIGDECK_DATA_DIR="$WORK/remote/data" \
    "$SERVE" serve --bind 127.0.0.1:0 >"$ART/remote-serve.log" 2>&1 &
REMOTE_PID=$!
REMOTE_URL=""
for _ in $(seq 300); do
    REMOTE_URL=$(sed -n 's|.*Sign in at \(http://[^/]*\)/ .*|\1|p' "$ART/remote-serve.log" | head -n 1)
    [ -n "$REMOTE_URL" ] && break
    kill -0 "$REMOTE_PID" 2>/dev/null || fail "the remote rigdeck serve exited: $(cat "$ART/remote-serve.log")"
    sleep 0.1
done
[ -n "$REMOTE_URL" ] || fail "the remote rigdeck serve printed no sign-in URL within 30 s"
REMOTE_TOKEN=$(tr -d '[:space:]' <"$WORK/remote/config/token")
remote_clients() {
    curl -fsS --max-time 5 -H "Authorization: Bearer $REMOTE_TOKEN" "$REMOTE_URL/api/v1/status" 2>/dev/null \
        | sed -n 's/.*"ws_clients": *\([0-9][0-9]*\).*/\1/p'
}

# Bad input first: no token, and an address without its scheme, each refused with the fix.
OUT=$(env -u RIGDECK_REMOTE_TOKEN timeout 30 "$BIN" --remote "$REMOTE_URL" 2>&1) && fail "--remote without a token started"
grep -q "needs that rig's token: set RIGDECK_REMOTE_TOKEN" <<<"$OUT" || fail "--remote without a token said: $OUT"
OUT=$(RIGDECK_REMOTE_TOKEN=x timeout 30 "$BIN" --remote "gpubox:7878" 2>&1) && fail "--remote gpubox:7878 started"
grep -q "must be an http:// or https:// URL, e.g. http://gpubox:7878" <<<"$OUT" || fail "--remote without a scheme said: $OUT"

: >"$APP_LOG.remote"
RIGDECK_REMOTE_TOKEN="$REMOTE_TOKEN" "$BIN" --remote "$REMOTE_URL" >>"$APP_LOG.remote" 2>&1 &
APP_PID=$!
CLIENTS=0
for _ in $(seq 120); do
    CLIENTS=$(remote_clients || true)
    [ "${CLIENTS:-0}" -ge 1 ] && break
    kill -0 "$APP_PID" 2>/dev/null || { cat "$APP_LOG.remote" >>"$APP_LOG"; fail "rigdeck-desktop --remote exited"; }
    sleep 0.5
done
cat "$APP_LOG.remote" >>"$APP_LOG"
[ "${CLIENTS:-0}" -ge 1 ] || fail "the remote rig saw no signed-in WebSocket within 60 s"
grep -q "showing the remote rig at $REMOTE_URL" "$APP_LOG.remote" || fail "the remote window did not say which rig it shows"
! grep -q "serving on" "$APP_LOG.remote" || fail "rigdeck-desktop --remote started a server of its own"
sleep 3
import -window root -display "$DISPLAY" "$ART/desktop-remote.png" || fail "import could not take the remote screenshot"
step "remote rig shown: its server counts ws_clients=$CLIENTS; screenshot $ART/desktop-remote.png"
kill -TERM "$APP_PID"
wait_for_exit "$APP_PID" 15 || fail "rigdeck-desktop --remote still runs 15 s after SIGTERM"
wait "$APP_PID" || true
APP_PID=""
rm -f "$APP_LOG.remote"
for _ in $(seq 50); do [ "$(remote_clients)" = 0 ] && break; sleep 0.2; done
[ "$(remote_clients)" = 0 ] || fail "the remote rig still counts a WebSocket after the window closed"
step "remote window closed; the remote rig keeps serving"

echo "desktop smoke: 1 passed, 0 failed"
