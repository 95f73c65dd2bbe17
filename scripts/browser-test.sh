#!/usr/bin/env bash
# The browser test of the web dashboard (tests/browser/dashboard.test.js): headless Chromium,
# driven by playwright-core, on the live page of a real run and on the run history.
#
#   scripts/browser-test.sh install   Debian's chromium (when missing and allowed) and the npm
#                                     packages of tests/browser (npm ci, from the lock file)
#   scripts/browser-test.sh run       the test (needs `cargo build`: it runs the debug binary,
#                                     or MSGBENCH_BIN); writes docs/dashboard-*.png with MSGBENCH_UPDATE_SCREENSHOTS=1
#   scripts/browser-test.sh           both
#
# Idempotent: what is installed is kept. Nothing is skipped silently: a missing node, npm or
# browser that cannot be installed is an error. Set MSGBENCH_NO_INSTALL=1 to forbid installing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target}
DIR=tests/browser
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

log() { echo "browser-test: $*" >&2; }

apt_install() { # apt_install PACKAGE...
  if [ "${MSGBENCH_NO_INSTALL:-0}" = 1 ]; then
    log "missing and MSGBENCH_NO_INSTALL=1: install the Debian package(s) $*"; return 1
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "missing: install the Debian package(s) $* (needs root and apt-get)"; return 1
  fi
  log "installing $*"
  local aptlog
  aptlog=$(mktemp)
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >"$aptlog" 2>&1; then
    apt-get update -qq >>"$aptlog" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>"$aptlog" 2>&1 \
      || { cat "$aptlog" >&2; log "could not install $*"; rm -f "$aptlog"; return 1; }
  fi
  rm -f "$aptlog"
}

install() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
  fi
  if [ ! -x "$CHROMIUM" ]; then
    apt_install chromium
  fi
  [ -x "$CHROMIUM" ] || { log "no browser at $CHROMIUM"; return 1; }
  # npm ci is skipped only when node_modules already holds exactly the locked versions.
  if [ ! -f "$DIR/node_modules/.package-lock.json" ] \
    || ! cmp -s <(sed -n '/"node_modules\//,$p' "$DIR/package-lock.json") \
                <(sed -n '/"node_modules\//,$p' "$DIR/node_modules/.package-lock.json"); then
    log "npm ci in $DIR"
    (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

run() {
  local bin=${MSGBENCH_BIN:-$CARGO_TARGET_DIR/debug/msgbench}
  [ -x "$bin" ] || { log "no msgbench binary at $bin: run cargo build first (or set MSGBENCH_BIN)"; return 1; }
  [ -d "$DIR/node_modules/playwright-core" ] || { log "playwright-core is not installed: scripts/browser-test.sh install"; return 1; }
  (cd "$DIR" && MSGBENCH_BIN=$bin CHROMIUM=$CHROMIUM node --test dashboard.test.js)
}

case "${1:-all}" in
  install) install ;;
  run) run ;;
  all) install; run ;;
  *) echo "usage: $0 [install|run|all]" >&2; exit 2 ;;
esac
