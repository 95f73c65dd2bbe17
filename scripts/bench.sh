#!/usr/bin/env bash
# Performance figures for the README and release notes. Prints numbers; asserts nothing.
# Timings on a shared machine are noisy: every figure is the median of several runs.
#
#   scripts/bench.sh            all benchmarks
#   scripts/bench.sh mem        generator ceiling on the in-process broker (target >= 5M msgs/s)
#   scripts/bench.sh nats       NATS 1 -> 1, smallest payload (target >= 1.1M msgs/s, <= 0.7 CPU-s/M)
#   scripts/bench.sh memory     RSS after 10^6 versus 10^7 messages (target within 10%)
#
# RUNS (default 5) sets the repetitions. The NATS benchmark starts nats-server via
# scripts/brokers.sh; if the Go `nats` CLI is on PATH (or in ~/.cache/gobin), `nats bench`
# runs in the same session for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target}
RUNS=${RUNS:-5}
cargo build --release --locked -q
B="$CARGO_TARGET_DIR/release/msgbench"
PATH="$PATH:$HOME/.cache/gobin"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# run_json ARGS... -> prints "rate cpu_s_per_million maxrss_kb received"
measure() {
  local out tm
  out=$(mktemp); tm=$(mktemp)
  /usr/bin/time -f "%U %S %M" -o "$tm" "$B" run "$@" --no-output --quiet --format json >"$out"
  python3 - "$out" "$tm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
u, s, rss = open(sys.argv[2]).read().split()[-3:]
m = r["result"]
total_msgs = sum(p["counters"]["received"] for p in r["phases"])
cpu = float(u) + float(s)
print(f'{m["received_per_s"]:.0f} {cpu / max(total_msgs, 1) * 1e6:.3f} {rss} {r["integrity"]["lost"]}')
PY
  rm -f "$out" "$tm"
}

bench_mem() {
  echo "== mem:// 1 producer -> 1 consumer, 64 B, unlimited, full stamping and recording ($RUNS runs)"
  local rates=()
  for _ in $(seq "$RUNS"); do
    read -r rate cpu rss lost < <(measure mem://bench --size 64 --warmup 1s --duration 5s)
    echo "  run: $rate msgs/s end to end, lost $lost"
    rates+=("$rate")
  done
  echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s (target >= 5,000,000)"
}

bench_nats() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  echo "== NATS core 1 publisher -> 1 subscriber, 40 B (smallest stamped payload), unlimited ($RUNS runs)"
  local rates=() cpus=()
  for _ in $(seq "$RUNS"); do
    read -r rate cpu rss lost < <(measure "$MSGBENCH_IT_NATS_URL" --size 40 --warmup 1s --duration 5s)
    echo "  run: $rate msgs/s end to end, $cpu CPU-s per million messages (msgbench process), lost $lost"
    rates+=("$rate"); cpus+=("$cpu")
  done
  echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s (target >= 1,100,000), $(printf '%s\n' "${cpus[@]}" | median) CPU-s per million (target <= 0.7)"
  if command -v nats >/dev/null 2>&1; then
    echo "== for comparison: nats bench (Go), 1 pub / 1 sub, 40 B, 5M messages"
    for _ in $(seq "$RUNS"); do
      /usr/bin/time -f "  nats bench CPU: user %U s, sys %S s" nats bench --server "$MSGBENCH_IT_NATS_URL" \
        --pub 1 --sub 1 --msgs 5000000 --size 40 --no-progress msgbench.compare 2>&1 \
        | grep -E "Pub stats|Sub stats|NATS Pub/Sub stats|CPU" || true
    done
  fi
}

bench_memory() {
  echo "== memory: RSS after 10^6 versus 10^7 messages (NATS, 1 -> 1, 40 B; median of $RUNS)"
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local small=() big=()
  for _ in $(seq "$RUNS"); do
    read -r _ _ rss _ < <(measure "$MSGBENCH_IT_NATS_URL" --size 40 --warmup 0s --messages 1000000); small+=("$rss")
    read -r _ _ rss _ < <(measure "$MSGBENCH_IT_NATS_URL" --size 40 --warmup 0s --messages 10000000); big+=("$rss")
  done
  local a b
  a=$(printf '%s\n' "${small[@]}" | median); b=$(printf '%s\n' "${big[@]}" | median)
  echo "  10^6: ${a} KiB, 10^7: ${b} KiB, ratio $(python3 -c "print(f'{$b/$a:.3f}')") (target <= 1.10)"
  echo "== memory: same on mem:// (64 B, unlimited; its bounded queue fills differently run to run)"
  small=(); big=()
  for _ in $(seq "$RUNS"); do
    read -r _ _ rss _ < <(measure mem://mem --size 64 --warmup 0s --messages 1000000); small+=("$rss")
    read -r _ _ rss _ < <(measure mem://mem --size 64 --warmup 0s --messages 10000000); big+=("$rss")
  done
  a=$(printf '%s\n' "${small[@]}" | median); b=$(printf '%s\n' "${big[@]}" | median)
  echo "  10^6: ${a} KiB, 10^7: ${b} KiB, ratio $(python3 -c "print(f'{$b/$a:.3f}')")"
}

case "${1:-all}" in
  mem) bench_mem ;;
  nats) bench_nats ;;
  memory) bench_memory ;;
  all) bench_mem; bench_nats; bench_memory ;;
  *) echo "usage: $0 [mem|nats|memory|all]" >&2; exit 2 ;;
esac
