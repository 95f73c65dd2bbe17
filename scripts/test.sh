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
# A fresh clone gains nothing from incremental compilation (its caches are per checkout path)
# and would leave gigabytes of them in the shared target folder on every run.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
[ "${1:-}" = "--" ] && shift

if ! command -v cargo >/dev/null 2>&1; then
  echo "test: cargo is missing: install Rust (rustup) 1.95 or newer" >&2
  exit 1
fi

# Old builds of this workspace's own crates pile up in the shared target folder (every change
# of the dependency graph hashes them anew; 50 GiB within days of CI runs), and a nearly full
# disk makes brokers refuse messages. Those untouched for 12 hours go; third-party builds stay.
prune_target() {
  local deps="$CARGO_TARGET_DIR/debug/deps" names n
  [ -d "$deps" ] || return 0
  # Test binaries: tests/it and tests/faults (each a folder with main.rs), the crates' own, and
  # the names of the modules, which were binaries of their own before they were gathered.
  names=$(for f in tests/*/main.rs; do basename "$(dirname "$f")"; done
    for f in tests/*/*.rs crates/*/tests/*.rs crates/drivers/*/tests/*.rs; do
      [ -e "$f" ] && basename "$f" .rs; done | grep -v '^main$' | sort -u)
  find "$deps" -maxdepth 1 -type f -mmin +720 \( -name 'msgbench*' -o -name 'libmsgbench*' \) -delete
  for n in $names; do
    find "$deps" -maxdepth 1 -type f -mmin +720 -name "$n-*" -delete
  done
  [ -d "$CARGO_TARGET_DIR/debug/incremental" ] &&
    find "$CARGO_TARGET_DIR/debug/incremental" -mindepth 1 -maxdepth 1 -mmin +720 -exec rm -rf {} +
  return 0
}
prune_target

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
# A test whose broker variable is unset skips itself with a message when run by hand; here, where
# every broker was just started, that would hide a broken setup: it fails instead.
export MSGBENCH_IT_REQUIRE=1
# Runs the tests make are recorded in a history of their own, not the user's.
MSGBENCH_RESULTS_DB="$(mktemp -d)/runs.db"
export MSGBENCH_RESULTS_DB

# The browser test's tools (Chromium, playwright-core) are installed before anything runs, so a
# machine that cannot have them fails here, not after the whole suite.
echo "test: browser test tools (scripts/browser-test.sh install)"
scripts/browser-test.sh install
echo "test: cargo fmt --check"
cargo fmt --all -- --check
echo "test: cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --features msgbench/kafka --locked -q -- -D warnings
echo "test: cargo test --workspace (brokers: $MSGBENCH_IT_NATS_URL $MSGBENCH_IT_MQTT_URL)"
log=$(mktemp)
status=0
cargo test --workspace --features msgbench/kafka --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# The API documentation builds without a warning (a broken intra-doc link, a missing doc comment
# in a library crate: they deny missing_docs). Only the workspace's crates are documented; the
# dependencies' metadata is what clippy and the tests already built, with the same features.
echo "test: cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --features msgbench/kafka --locked --quiet || status=$?
# The web dashboard as a person sees it: headless Chromium on a live run and the run history.
# It runs the binary `cargo test` just built; its TAP totals join the closing line.
echo "test: browser (scripts/browser-test.sh run)"
scripts/browser-test.sh run 2>&1 | tee -a "$log" || status=$?
# The Kubernetes manifests against the Kubernetes schemas, and their wiring (no cluster here).
echo "test: deploy/kubernetes (scripts/check-deploy.sh)"
scripts/check-deploy.sh "$CARGO_TARGET_DIR/debug/msgbench" || status=$?
# Every fuzz target for a few seconds (libFuzzer, nightly; scripts/fuzz.sh): a decoder that
# crashes on what the fuzzer makes of the seeds fails the run. The first run builds the fuzz
# crate (several minutes); later runs take about a minute.
echo "test: fuzz smoke (scripts/fuzz.sh --smoke)"
scripts/fuzz.sh --smoke || status=$?
# One closing line with the totals over every test binary (cargo prints one summary per binary,
# the last ones being doc tests with nothing to run).
summary=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^# pass [0-9]+$/ { p += $3 } /^# fail [0-9]+$/ { f += $3 }
     END { printf "tests: %d passed, %d failed", p, f }' "$log")
rm -f "$log"
exit "$status"
