#!/usr/bin/env bash
# Installs Rigdeck from this unpacked tarball, for distributions without .deb or .rpm.
#
#   ./install.sh [--prefix DIR] [--headless]     install (or upgrade) into DIR
#   ./install.sh --uninstall [--prefix DIR] [--purge]
#
# DIR defaults to /usr/local as root, else ~/.local. The libraries Rigdeck needs are checked
# first and a missing one stops the install with the list to get (nothing is copied); with
# --headless the desktop window's libraries (WebKitGTK) are not needed and `rigdeck-desktop` is
# left out. Every file is copied next to its place first and only moved in once all copies
# worked, so a failed install leaves the previous one as it was. Uninstalling removes what the
# install wrote (listed in DIR/lib/rigdeck/installed-files) and keeps the user's data — database,
# settings, models and engine builds under ~/.local/share/rigdeck and ~/.config/rigdeck — unless
# --purge is given, which removes those of the user running it too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" -eq 0 ]; then prefix=/usr/local; else prefix=$HOME/.local; fi
action=install
headless=false
purge=false
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a folder}; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --headless) headless=true; shift ;;
    --uninstall) action=uninstall; shift ;;
    --purge) purge=true; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
manifest=$prefix/lib/rigdeck/installed-files

# Which distribution package provides a library, for the message (Debian/Ubuntu; Fedora).
package_of() {
  case "$1" in
    libwebkit2gtk-4.1*|libjavascriptcoregtk-4.1*) echo "libwebkit2gtk-4.1-0 (Fedora: webkit2gtk4.1)" ;;
    libgtk-3*|libgdk-3*) echo "libgtk-3-0 (Fedora: gtk3)" ;;
    libayatana-appindicator3*) echo "libayatana-appindicator3-1 (Fedora: libayatana-appindicator-gtk3)" ;;
    libgomp*) echo "libgomp1 (Fedora: libgomp)" ;;
    libssl*|libcrypto*) echo "libssl3 (Fedora: openssl-libs)" ;;
    libsoup-3*) echo "libsoup-3.0-0 (Fedora: libsoup3)" ;;
    *) echo "the package that provides $1" ;;
  esac
}

# The shared libraries the given binaries need and this machine lacks.
missing_libraries() {
  local binary
  for binary in "$@"; do
    ldd "$binary" 2>/dev/null | awk '/=> not found/ {print $1}'
  done | sort -u
}

uninstall() {
  if [ ! -f "$manifest" ]; then
    echo "install.sh: no Rigdeck installed in $prefix (no $manifest)" >&2
    exit 1
  fi
  while IFS= read -r file; do
    rm -f "$prefix/$file"
  done < "$manifest"
  rm -f "$manifest"
  # Folders the install made, deepest first, where now empty.
  find "$prefix/lib/rigdeck" -depth -type d -empty -delete 2>/dev/null || true
  echo "Rigdeck removed from $prefix."
  if $purge; then
    rm -rf "${XDG_DATA_HOME:-$HOME/.local/share}/rigdeck" "${XDG_CONFIG_HOME:-$HOME/.config}/rigdeck"
    echo "Purged this user's data (database, settings, token, models, engine builds)."
  else
    echo "Your data stays in ${XDG_DATA_HOME:-$HOME/.local/share}/rigdeck and ${XDG_CONFIG_HOME:-$HOME/.config}/rigdeck (--uninstall --purge removes it)."
  fi
}

install_files() {
  local engines=("$here"/lib/rigdeck/engines/*/bin/llama-server)
  local needed=("$here/bin/rigdeck" "${engines[@]}")
  $headless || needed+=("$here/bin/rigdeck-desktop")
  local missing
  missing=$(missing_libraries "${needed[@]}")
  if [ -n "$missing" ]; then
    echo "install.sh: this machine lacks libraries Rigdeck needs; install these, then run install.sh again:" >&2
    while IFS= read -r lib; do
      echo "  $lib  — $(package_of "$lib")" >&2
    done <<< "$missing"
    $headless || echo "(a server without a display can run ./install.sh --headless: no desktop window, no WebKitGTK)" >&2
    exit 1
  fi

  local files=()
  while IFS= read -r file; do
    files+=("$file")
  done < <(cd "$here" && find bin lib share -type f | sort)
  if $headless; then
    local kept=()
    for file in "${files[@]}"; do
      case "$file" in bin/rigdeck-desktop|share/applications/*|share/icons/*) ;; *) kept+=("$file") ;; esac
    done
    files=("${kept[@]}")
  fi

  # Copy next to each place first; move in only when every copy worked.
  local staged=()
  trap 'for f in "${staged[@]}"; do rm -f "$prefix/$f.rigdeck-new"; done' EXIT
  for file in "${files[@]}"; do
    install -D -m "$(stat -c %a "$here/$file")" "$here/$file" "$prefix/$file.rigdeck-new"
    staged+=("$file")
  done
  local desktop=share/applications/rigdeck-desktop.desktop
  if [ -f "$prefix/$desktop.rigdeck-new" ]; then
    sed -i "s|^Exec=.*|Exec=$prefix/bin/rigdeck-desktop|" "$prefix/$desktop.rigdeck-new"
  fi
  # An upgrade: what the last install wrote and this one does not (an older engine build) goes.
  if [ -f "$manifest" ]; then
    while IFS= read -r old; do
      printf '%s\n' "${files[@]}" | grep -qxF "$old" || rm -f "$prefix/$old"
    done < "$manifest"
  fi
  for file in "${files[@]}"; do
    mv -f "$prefix/$file.rigdeck-new" "$prefix/$file"
  done
  trap - EXIT
  printf '%s\n' "${files[@]}" > "$manifest"
  find "$prefix/lib/rigdeck/engines" -depth -type d -empty -delete 2>/dev/null || true

  echo "Rigdeck installed in $prefix."
  case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) echo "Add $prefix/bin to your PATH to run 'rigdeck' by name." ;;
  esac
  if $headless; then
    echo "Start it with '$prefix/bin/rigdeck serve', or keep it running at boot: '$prefix/bin/rigdeck service install'."
  else
    echo "Open it from your desktop's menu (Rigdeck) or with '$prefix/bin/rigdeck-desktop'; headless: '$prefix/bin/rigdeck serve'."
  fi
}

case "$action" in
  install) install_files ;;
  uninstall) uninstall ;;
esac
