#!/usr/bin/env bash
# Fuzzing every decoder msgbench wrote (protocol codecs, both sides where msgbench has both; the
# stamp; scenario and results files) with libFuzzer through cargo-fuzz. The targets are the
# binaries of fuzz/ (a nightly-only crate outside the workspace); their bodies live in
# crates/fuzz-targets, whose stable tests run every seed of fuzz/corpus/ through them.
#
#   scripts/fuzz.sh [--list]             the targets
#   scripts/fuzz.sh TARGET [--time D]    fuzz one target for D seconds (default 60)
#   scripts/fuzz.sh all [--time D]       every target, one after the other, D seconds each
#   scripts/fuzz.sh --smoke              every target for a few seconds (MSGBENCH_FUZZ_SMOKE_S,
#                                        default 3): fails if any crashes (the test command);
#                                        without nightly, the seeds through the targets on stable
#
# Each run starts from a scratch copy of the target's seeds (fuzz/corpus/TARGET), so what the
# fuzzer adds to its corpus never lands in the clone; MSGBENCH_FUZZ_CORPUS=DIR keeps the grown
# corpora in DIR/TARGET instead. Crash inputs go to fuzz/artifacts/TARGET/ (ignored by git):
# replay one with `cargo +nightly fuzz run TARGET FILE`, then add it to the decoder's unit
# tests. Builds go to ${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target}/fuzz. The decoders are
# safe Rust, so no sanitizer is compiled in by default (bounds and overflow checks are on, and
# runs are twice as fast); MSGBENCH_FUZZ_SANITIZER=address turns AddressSanitizer on.
# MSGBENCH_FUZZ_TOOLCHAIN picks the toolchain (default nightly; e.g. nightly-2026-11-01).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target}/fuzz"
sanitizer=${MSGBENCH_FUZZ_SANITIZER:-none}
toolchain=${MSGBENCH_FUZZ_TOOLCHAIN:-nightly}
targets=$(for f in fuzz/fuzz_targets/*.rs; do basename "$f" .rs; done)

usage() {
  sed -n '7,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

what="" time=60 smoke=0
while [ $# -gt 0 ]; do
  case "$1" in
    --list) what="" ;;
    --smoke) smoke=1 ;;
    --time)
      [ $# -ge 2 ] || usage
      time=$2
      shift
      ;;
    --time=*) time=${1#--time=} ;;
    -h | --help) usage 0 ;;
    -*) usage ;;
    *) what=$1 ;;
  esac
  shift
done
case "$time" in '' | *[!0-9]*) echo "fuzz: --time takes whole seconds, not '$time'" >&2; exit 2 ;; esac

if [ "$smoke" = 1 ]; then
  what=all
  time=${MSGBENCH_FUZZ_SMOKE_S:-3}
fi
if [ -z "$what" ]; then
  echo "$targets"
  exit 0
fi
if [ "$what" = all ]; then
  run=$targets
elif grep -qx -- "$what" <<<"$targets"; then
  run=$what
else
  echo "fuzz: no target '$what' (scripts/fuzz.sh --list)" >&2
  exit 2
fi

if ! cargo "+$toolchain" --version >/dev/null 2>&1; then
  echo "fuzz: libFuzzer needs a nightly Rust toolchain, and $toolchain is not installed: rustup toolchain install $toolchain" >&2
  if [ "$smoke" = 1 ]; then
    # Without nightly, the smoke runs the seeds through the same target bodies on stable.
    echo "fuzz: smoke without libFuzzer: every seed through its target (cargo test, stable)" >&2
    exec cargo test -p msgbench-fuzz-targets --test corpus
  fi
  exit 1
fi
if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked
fi

fuzz=(cargo "+$toolchain" fuzz)
opts=(--sanitizer "$sanitizer" --target-dir "$target_dir")
echo "fuzz: building the targets ($toolchain, sanitizer $sanitizer, into $target_dir)"
build_start=$SECONDS
"${fuzz[@]}" build "${opts[@]}"
echo "fuzz: built in $((SECONDS - build_start)) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
summary="" failed=""
for t in $run; do
  if [ -n "${MSGBENCH_FUZZ_CORPUS:-}" ]; then
    corpus="$MSGBENCH_FUZZ_CORPUS/$t"
  else
    corpus="$scratch/corpus-$t"
  fi
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  log="$scratch/$t.log"
  echo "fuzz: $t for ${time} s"
  status=0
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: growing past 2 GiB is an
  # unbounded allocation. Both count as crashes.
  "${fuzz[@]}" run "${opts[@]}" "$t" "$corpus" -- \
    -max_total_time="$time" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1 || status=$?
  execs=$(awk '/stat::number_of_executed_units:/ { print $2 }' "$log" | tail -1)
  units=$(find "$corpus" -type f | wc -l)
  if [ "$status" = 0 ]; then
    result=ok
  else
    result="CRASH (exit $status)"
    failed="$failed $t"
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written|deadly signal|timeout|out-of-memory' "$log" | head -8 >&2 || true
  fi
  summary+=$(printf '%-16s %12s %8s  %s' "$t" "${execs:-?}" "$units" "$result")$'\n'
done

echo
printf '%-16s %12s %8s  %s\n' target executions corpus result
printf '%s' "$summary"
if [ -n "$failed" ]; then
  echo "fuzz: crashed:$failed (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
