# Sourced by the packaging check and the install benchmark: a free loopback port, and whether an
# installed daemon is ready as a user would see it (the dashboard page served, a telemetry frame,
# the engine the package ships registered).

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# dashboard_ready URL TOKEN_FILE: true once, false (quietly) until then.
dashboard_ready() {
  local url=$1 token_file=$2 auth
  [ -f "$token_file" ] || return 1
  auth="Authorization: Bearer $(cat "$token_file")"
  # Whole answers into grep's here-strings: `curl | grep -q` can end curl early on a long body.
  grep -q '<title>' <<< "$(curl -fsS "$url/" 2>/dev/null)" \
    && curl -fsS -H "$auth" "$url/api/v1/telemetry/latest" >/dev/null 2>&1 \
    && grep -q '"packaged"' <<< "$(curl -fsS -H "$auth" "$url/api/v1/engines" 2>/dev/null)"
}
