#!/usr/bin/env bash
# macOS: Hearth.app (PyInstaller, packaging/hearth.spec) and a drag-to-Applications .dmg (hdiutil).
#
#   packaging/macos/build_dmg.sh          PYTHON=... (default .venv/bin/python)
#
# Signing and notarization happen only when these are set (a Developer ID build for other Macs needs both):
#   CODESIGN_IDENTITY   "Developer ID Application: NAME (TEAMID)", in the login keychain; PyInstaller then signs
#                       every binary and the .app with the hardened runtime and packaging/macos/entitlements.plist
#   NOTARY_PROFILE      a notarytool keychain profile (`xcrun notarytool store-credentials NAME ...`); the .dmg
#                       is submitted, waited for and stapled
# Without them the .app is ad-hoc signed (PyInstaller's default): it runs on the build Mac, and elsewhere after
# the person allows it in System Settings → Privacy & Security.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
cd "$ROOT"
packaging/build.sh --bundle-only  # the same pinned PyInstaller; on macOS the spec also makes Hearth.app
VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
APP=build/dist/Hearth.app
DMG=build/dist/Hearth-$VERSION-macos-$(uname -m).dmg

"$APP/Contents/MacOS/hearth" --help >/dev/null  # the bundled CLI starts
codesign --verify --deep --strict "$APP"

STAGE=build/dmg
rm -rf "$STAGE" "$DMG"
mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
hdiutil create -volname "Hearth $VERSION" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$DMG"

if [ -n "${CODESIGN_IDENTITY:-}" ]; then
  codesign --force --timestamp --sign "$CODESIGN_IDENTITY" "$DMG"
fi
if [ -n "${NOTARY_PROFILE:-}" ]; then
  xcrun notarytool submit "$DMG" --keychain-profile "$NOTARY_PROFILE" --wait
  xcrun stapler staple "$DMG"
fi
echo "$DMG $(du -h "$DMG" | cut -f1)"
