#!/bin/sh
# Install Hearth from this unpacked archive, for the current user (no root needed):
#
#   ./install.sh              copies the app to ~/.local/opt/hearth, puts `hearth` and `hearth-app` in
#                             ~/.local/bin, a menu entry and icons in ~/.local/share
#   ./install.sh --uninstall  removes exactly those files again; your tasks and settings stay
#
# Run as root, it installs for everyone instead: /opt/hearth, /usr/local/bin, /usr/local/share.
# Hearth keeps its data in ~/.local/share/Hearth and its logs in ~/.local/state/Hearth/log.
# The bundle brings its own Qt and xcb libraries; the window uses the system's libGL, libEGL and libxcb.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" = 0 ]; then
  opt=/opt/hearth bin=/usr/local/bin share=/usr/local/share
else
  opt=$HOME/.local/opt/hearth bin=$HOME/.local/bin share=${XDG_DATA_HOME:-$HOME/.local/share}
fi
icons=$share/icons/hicolor

uninstall() {
  rm -rf "$opt"
  rm -f "$bin/hearth" "$bin/hearth-app" "$share/applications/hearth.desktop"
  rm -f "$icons"/*/apps/hearth.png
  echo "Hearth removed. Your data is still in ~/.local/share/Hearth (delete that folder to remove it too)."
}

refresh() {
  command -v update-desktop-database >/dev/null && update-desktop-database -q "$share/applications" || true
  command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$icons" 2>/dev/null || true
}

if [ "${1:-}" = "--uninstall" ]; then
  uninstall
  refresh
  exit 0
fi

rm -rf "$opt"
mkdir -p "$(dirname "$opt")" "$bin" "$share/applications"
cp -a "$here/hearth" "$opt"
ln -sf "$opt/hearth" "$bin/hearth"
ln -sf "$opt/hearth-app" "$bin/hearth-app"
# The menu entry names the program by its full path: ~/.local/bin is not on every desktop session's PATH.
sed "s|^Exec=hearth-app|Exec=$opt/hearth-app|" "$here/hearth.desktop" > "$share/applications/hearth.desktop"
for dir in "$here"/icons/*/apps; do
  size=$(basename "$(dirname "$dir")")
  mkdir -p "$icons/$size/apps"
  cp "$dir/hearth.png" "$icons/$size/apps/hearth.png"
done
refresh
echo "Hearth installed in $opt. Start it from the applications menu, or run: $bin/hearth-app"
case ":$PATH:" in *":$bin:"*) ;; *) echo "($bin is not on your PATH; add it to run 'hearth' in a terminal.)" ;; esac
