#!/usr/bin/env bash
# Starts, stops and reports the real brokers msgbench's tests run against, on loopback only.
#
#   scripts/brokers.sh up       install (Debian packages, when missing and allowed) and start
#   scripts/brokers.sh down     stop what `up` started (by PID)
#   scripts/brokers.sh status   show what runs and where
#   scripts/brokers.sh env      print the environment variables tests read (eval "$(... env)")
#
# Brokers (for now): nats-server on 127.0.0.1:${MSGBENCH_NATS_PORT:-14222}.
# State (PID files, logs) lives in ${MSGBENCH_BROKERS_DIR:-$HOME/.cache/msgbench-brokers}.
# Set MSGBENCH_NO_INSTALL=1 to forbid installing packages.
set -euo pipefail

STATE=${MSGBENCH_BROKERS_DIR:-$HOME/.cache/msgbench-brokers}
NATS_PORT=${MSGBENCH_NATS_PORT:-14222}
mkdir -p "$STATE"

log() { echo "brokers: $*" >&2; }

need_pkg() { # need_pkg BINARY PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "${MSGBENCH_NO_INSTALL:-0}" = 1 ]; then
    log "$1 is missing and MSGBENCH_NO_INSTALL=1: install the Debian package '$2'"; return 1
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "$1 is missing: install the Debian package '$2' (needs root and apt-get)"; return 1
  fi
  log "installing $2"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >"$STATE/apt.log" 2>&1; then
    apt-get update -qq >>"$STATE/apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >>"$STATE/apt.log" 2>&1 \
      || { log "could not install $2 (see $STATE/apt.log)"; return 1; }
  fi
}

running() { # running NAME
  local pidf="$STATE/$1.pid"
  [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null
}

wait_port() { # wait_port PORT SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

nats_up() {
  if running nats; then log "nats-server already running (pid $(cat "$STATE/nats.pid"))"; return 0; fi
  need_pkg nats-server nats-server
  cat >"$STATE/nats.conf" <<CONF
listen: 127.0.0.1:$NATS_PORT
max_payload: 8MB
CONF
  nats-server -c "$STATE/nats.conf" -l "$STATE/nats.log" >/dev/null 2>&1 &
  echo $! >"$STATE/nats.pid"
  if ! wait_port "$NATS_PORT" 10; then
    log "nats-server did not open 127.0.0.1:$NATS_PORT (see $STATE/nats.log)"; return 1
  fi
  log "nats-server up on nats://127.0.0.1:$NATS_PORT (pid $(cat "$STATE/nats.pid"))"
}

stop() { # stop NAME
  local pidf="$STATE/$1.pid"
  if running "$1"; then
    local pid; pid=$(cat "$pidf")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "$1 stopped"
  fi
  rm -f "$pidf"
}

case "${1:-}" in
  up) nats_up ;;
  down) stop nats ;;
  status)
    if running nats; then echo "nats: running, nats://127.0.0.1:$NATS_PORT (pid $(cat "$STATE/nats.pid"))"; else echo "nats: stopped"; fi ;;
  env) echo "export MSGBENCH_IT_NATS_URL=nats://127.0.0.1:$NATS_PORT" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
