#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs and starts the brokers the tests need
# (scripts/brokers.sh), runs every test of every crate, and stops what it started.
#
#   scripts/test.sh              all tests
#   scripts/test.sh -- FILTER    extra arguments go to `cargo test`
#
# Builds reuse ${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target} so only a fresh machine
# compiles the dependency tree from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
[ "${1:-}" = "--" ] && shift

if ! command -v cargo >/dev/null 2>&1; then
  echo "test: cargo is missing: install Rust (rustup) 1.95 or newer" >&2
  exit 1
fi

started=0
summary=""
cleanup() {
  if [ "$started" = 1 ]; then scripts/brokers.sh down || true; fi
  # The totals close the output, after everything else.
  [ -n "$summary" ] && echo "$summary"
  return 0
}
trap cleanup EXIT
# The status is read whole before it is searched: with pipefail, `status | grep -q` fails
# whenever grep exits before status has written its last line (SIGPIPE), and the brokers
# were then silently not started.
brokers_status=$(scripts/brokers.sh status)
if grep -qv ': running,' <<<"$brokers_status"; then
  started=1 # before `up`: what a partial start did start is stopped again on the way out
  scripts/brokers.sh up
  # Every broker must answer before a test runs: a test against a dead port fails for nothing.
  brokers_status=$(scripts/brokers.sh status)
  if grep -v ': running,' <<<"$brokers_status" >&2; then
    echo "test: a broker is not answering (see scripts/brokers.sh status)" >&2
    exit 1
  fi
fi
eval "$(scripts/brokers.sh env)"

echo "test: cargo fmt --check"
cargo fmt --all -- --check
echo "test: cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -q -- -D warnings
echo "test: cargo test --workspace (brokers: $MSGBENCH_IT_NATS_URL $MSGBENCH_IT_MQTT_URL)"
log=$(mktemp)
status=0
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# One closing line with the totals over every test binary (cargo prints one summary per binary,
# the last ones being doc tests with nothing to run).
summary=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed", p, f }' "$log")
rm -f "$log"
exit "$status"
