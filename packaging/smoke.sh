#!/usr/bin/env bash
# The installer, end to end, on this machine (Debian or Ubuntu, as root; it installs and removes the package):
#
#   packaging/smoke.sh [--no-build]          PYTHON=... as for build.sh; PREVIOUS_REV: see step 2
#
#  1. builds the bundle and the .deb (packaging/build.sh), unless --no-build;
#  2. makes a data folder with the previous version's code (PREVIOUS_REV: the newest tag before HEAD, else
#     c7556c5, the last commit before the installers) and one turn of the bundled model, for step 7;
#  3. installs the .deb (its Depends through apt-get), checks the launchers, menu entry, icons and libraries;
#  4. starts the installed app under Xvfb for a user who never ran Hearth (a fresh HOME) and without a network
#     (a network namespace of its own), waits for the window, creates a task and sends one message to the
#     bundled model by keyboard (xdotool), waits until the answer is persisted (`hearth show` from the bundle),
#     quits with Ctrl+Q;
#  5. starts it again and checks it shows the task; checks the log file and the data folder locations;
#  6. measures launch → first paint of the installed app against the virtualenv (tests/benchmarks);
#  7. opens the previous version's data folder with the installed app (migrations at open) and reads its task;
#  8. removes the package and checks nothing of it is left outside the user's data folder.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
MESSAGE="Say hello in five words"
cd "$ROOT"
WORK=$(mktemp -d /tmp/hearth-smoke.XXXXXX)
APP_PID="" XVFB_PID="" INSTALLED=""

step() { printf '\n== %s\n' "$*"; }
fail() { echo "SMOKE FAILED: $*" >&2; exit 1; }
cleanup() {
  [ -n "$APP_PID" ] && kill "$APP_PID" 2>/dev/null || true
  [ -n "$XVFB_PID" ] && kill "$XVFB_PID" 2>/dev/null || true
  [ -n "$INSTALLED" ] && dpkg -P hearth >/dev/null 2>&1 || true
}
trap cleanup EXIT
apt_updated=""
apt_install() {
  [ -n "$apt_updated" ] || { apt-get update -q >/dev/null; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "$@" \
    >/dev/null
}
missing_pkgs() { for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done; }
wait_for() {  # wait_for SECONDS WHAT COMMAND...: retry COMMAND every second
  local until=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$until" ] || fail "timed out waiting for $what"
    sleep 1
  done
}

step "1. build"
[ "${1:-}" = "--no-build" ] || packaging/build.sh
DEB=$(ls -t "$ROOT"/build/dist/hearth_*_amd64.deb | head -1)
VERSION=$(dpkg-deb -f "$DEB" Version)
echo "bundle $(du -sh build/dist/hearth | cut -f1), .deb $(du -h "$DEB" | cut -f1): $DEB"
tools=$(missing_pkgs xvfb xdotool)
[ -z "$tools" ] || { echo "+ apt-get install $tools"; apt_install $tools; }

step "2. a data folder made by the previous version"
PREV=${PREVIOUS_REV:-$(git describe --tags --abbrev=0 HEAD^ 2>/dev/null || echo c7556c5)}
mkdir -p "$WORK/prev"
git archive "$PREV" runtime | tar -x -C "$WORK/prev"
OLD=$WORK/old-data
(cd "$WORK/prev" && env -u HEARTH_HOME PYTHONPATH="$WORK/prev" "$PY" -m runtime.cli --home "$OLD" run "$MESSAGE") \
  >"$WORK/old.out" 2>"$WORK/old.err" || fail "the previous version's turn failed: $(cat "$WORK/old.err")"
OLD_TASK=$(awk '/^task /{print $2}' "$WORK/old.err")
echo "$PREV made $OLD with task $OLD_TASK: $(head -c 200 "$WORK/old.out")"

step "3. install $DEB"
deps=$(dpkg-deb -f "$DEB" Depends | sed 's/([^)]*)//g; s/,/ /g')
need=$(missing_pkgs $deps)
[ -z "$need" ] || { echo "+ apt-get install $need (the package's Depends)"; apt_install $need; }
marker=$WORK/before-install
touch "$marker"
sleep 1
dpkg -i "$DEB" >/dev/null
INSTALLED=1
for cmd in hearth hearth-app; do
  [ "$(readlink -f "$(command -v $cmd)")" = "/opt/hearth/$cmd" ] || fail "$cmd is not on PATH"
done
[ -f /usr/share/icons/hicolor/256x256/apps/hearth.png ] || fail "no icon in the hicolor theme"
if command -v desktop-file-validate >/dev/null; then desktop-file-validate /usr/share/applications/hearth.desktop; fi
notfound=$(find /opt/hearth -type f \( -name '*.so*' -o -name 'hearth*' \) -print0 | xargs -0 -n1 ldd 2>/dev/null \
  | grep 'not found' | sort -u || true)
[ -z "$notfound" ] || fail "libraries missing after install: $notfound"
echo "installed: $(dpkg-query -W -f='${Package} ${Version}, ${Installed-Size} KB' hearth)"
echo "launchers, icons, menu entry and libraries OK"

step "4. first start under Xvfb for a new user, one message through the window"
export HOME=$WORK/home
mkdir -p "$HOME"
unset HEARTH_HOME XDG_DATA_HOME XDG_STATE_HOME XDG_CONFIG_HOME XDG_CACHE_HOME QT_QPA_PLATFORM
Xvfb -displayfd 3 -screen 0 1280x900x24 -nolisten tcp 3>"$WORK/display" 2>/dev/null &
XVFB_PID=$!
wait_for 10 "Xvfb" test -s "$WORK/display"
export DISPLAY=:$(cat "$WORK/display")
cd "$WORK"  # the installed app must not need the source tree
# In a network namespace of its own: the installed app and its model need no network (X is a Unix socket).
unshare --net hearth-app --report-startup stay >"$WORK/app1.out" 2>"$WORK/app1.err" &
APP_PID=$!
wait_for 60 "the main window" xdotool search --onlyvisible --name '^Hearth$'
wait_for 60 "the runtime" test -s "$WORK/app1.out"
WIN=$(xdotool search --onlyvisible --name '^Hearth$' | head -1)
echo "window $WIN up; startup report: $(cat "$WORK/app1.out")"
grep -q '"error": null' "$WORK/app1.out" || fail "the app reported a startup error"
xdotool windowfocus --sync "$WIN" key ctrl+n
wait_for 20 "the New task dialog" xdotool search --onlyvisible --name '^New task$'
DLG=$(xdotool search --onlyvisible --name '^New task$' | head -1)
xdotool windowfocus --sync "$DLG" key Tab Return  # from the goal to the title; Enter = Create task
wait_for 30 "the task" sh -c 'hearth tasks | awk "NR > 1" | grep -q .'  # below the header line
TASK=$(hearth tasks | awk 'NR==2{print $1}')
# Typed too early, the message would land on the welcome page: wait for the window to be named after the task.
wait_for 30 "the task's panel" sh -c "xdotool getwindowname $WIN | grep -qv '^Hearth\$'"
xdotool windowfocus --sync "$WIN"
xdotool type --delay 30 "$MESSAGE"
xdotool key Return
# Done: the task is idle again (`show`'s header) and its answer is saved.
wait_for 240 "the answer to be persisted" sh -c "hearth show $TASK >'$WORK/show.txt' && head -1 '$WORK/show.txt' \
  | grep -q '\[idle\]' && grep -q '^## assistant' '$WORK/show.txt'"
hearth show "$TASK" | tee "$WORK/show1.txt"
hearth models list | grep -q "qwen2.5-1.5b-instruct" || fail "the installed app lists no catalog models"
[ "$(sed -n '/^## user/,/^## assistant/p' "$WORK/show1.txt" | grep -c "$MESSAGE")" = 1 ] \
  || fail "the typed message is not the task's input"
[ -n "$(sed -n '/^## assistant/,$p' "$WORK/show1.txt" | tail -n +2 | tr -d '[:space:]')" ] \
  || fail "the assistant answer is empty"
xdotool windowfocus --sync "$WIN" key ctrl+q
wait_for 30 "the app to quit" sh -c "! kill -0 $APP_PID"
wait "$APP_PID" || fail "the app exited with $?"
APP_PID=""
echo "quit cleanly"

step "5. second start: the task is there"
hearth-app --report-startup exit >"$WORK/app2.out" 2>"$WORK/app2.err" || fail "second start: $(cat "$WORK/app2.err")"
cat "$WORK/app2.out"
grep -q "\"tasks\": \[\"$TASK\"\]" "$WORK/app2.out" || fail "the second start does not show task $TASK"
DATA=$HOME/.local/share/Hearth LOG=$HOME/.local/state/Hearth/log/hearth.log
[ -f "$DATA/hearth.sqlite3" ] || fail "no database in $DATA"
grep -q "Hearth $VERSION starting (installed build)" "$LOG" || fail "no start line in $LOG"
echo "data in $DATA ($(ls "$DATA" | tr '\n' ' ')); log in $LOG ($(wc -l <"$LOG") lines)"
cd "$ROOT"

step "6. launch → first paint: installed app vs virtualenv"
env -u DISPLAY "$PY" tests/benchmarks/bench_bundle_launch.py --app /opt/hearth/hearth-app --rounds 5

step "7. upgrade: the installed app opens the previous version's data folder"
hearth --home "$OLD" show "$OLD_TASK" | grep -q '^## assistant' || fail "old task $OLD_TASK not readable"
hearth-app --home "$OLD" --report-startup exit >"$WORK/app3.out" 2>"$WORK/app3.err" \
  || fail "opening the old data folder: $(cat "$WORK/app3.err")"
grep -q "\"tasks\": \[\"$OLD_TASK\"\]" "$WORK/app3.out" || fail "the old task is not shown: $(cat "$WORK/app3.out")"
revision() {
  "$PY" -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(
    "select version_num from alembic_version").fetchone()[0])' "$1"
}
[ "$(revision "$OLD/hearth.sqlite3")" = "$(revision "$DATA/hearth.sqlite3")" ] || fail "old data folder not migrated"
echo "old task $OLD_TASK read and shown; schema at $(revision "$OLD/hearth.sqlite3"), as in a new data folder"

step "8. uninstall"
dpkg -L hearth >"$WORK/files"
dpkg -P hearth >/dev/null
INSTALLED=""
while read -r f; do [ -d "$f" ] || [ ! -e "$f" ] || fail "$f is still there"; done <"$WORK/files"
[ ! -e /opt/hearth ] || fail "/opt/hearth is still there"
# Anything new since the install outside the data folder, not owned by a package (others may install meanwhile),
# and not a cache the desktop's own dpkg triggers rebuild.
left=$(find /opt /usr /etc /var/lib -xdev -newer "$marker" ! -type d ! -path '/var/lib/dpkg/*' \
  ! -path '/var/lib/apt/*' ! -name icon-theme.cache ! -name mimeinfo.cache 2>/dev/null \
  | while read -r f; do dpkg -S "$f" >/dev/null 2>&1 || echo "$f"; done)
[ -z "$left" ] || fail "left after removal: $left"
# The person's home holds only the data folder, the log folder and fontconfig's cache (made by any Qt app).
strays=$(find "$HOME" -xdev ! -type d ! -path "$DATA/*" ! -path "$HOME/.local/state/Hearth/*" \
  ! -path "$HOME/.cache/fontconfig/*")
[ -z "$strays" ] || fail "files the app wrote outside its data and log folders: $strays"
echo "removed: no file of the package left; the user's data stays in $DATA, nothing else in their home"
rm -rf "$WORK"
echo
echo "SMOKE PASSED"
