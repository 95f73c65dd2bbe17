#!/usr/bin/env bash
# Performance figures for docs/BENCHMARKS.md and release notes. Prints numbers; asserts nothing.
# Timings on a shared machine are noisy: every figure is the median of several runs.
#
#   scripts/bench.sh            all benchmarks
#   scripts/bench.sh mem        generator ceiling on the in-process broker (target >= 5M msgs/s)
#   scripts/bench.sh nats       NATS 1 -> 1, smallest payload (target >= 1.1M msgs/s, <= 0.7 CPU-s/M)
#   scripts/bench.sh memory     RSS after 10^6 versus 10^7 messages (target within 10%)
#   scripts/bench.sh mqtt       Mosquitto, 10 publishers + 10 subscribers, 100 B, QoS 0 and 1
#   scripts/bench.sh mqtt-ws    MQTT over WebSocket against plain MQTT, RabbitMQ and Artemis
#                               (targets: <= 4.5 / <= 9 CPU-s per million, QoS 1 >= 45k msgs/s),
#                               on the test mosquitto (TCP_NODELAY) and on one as shipped (Nagle)
#   scripts/bench.sh demo       embedded broker at 1,000 msgs/s (target: e2e p99 < 2 ms)
#   scripts/bench.sh storm      connect storm against `msgbench serve mqtt` (aim >= 10,000/s)
#   scripts/bench.sh amqp       RabbitMQ 1 -> 1, 1 KB, confirms (window 100), 10 s, interleaved
#                               with RabbitMQ PerfTest (scripts/perftest.sh): msgs/s and CPU-s
#                               per million (target: >= PerfTest's rate at <= 0.3x its CPU)
#   scripts/bench.sh sink       against `msgbench serve amqp-sink`: AMQP connections/s (handshake
#                               + close, target >= 20,000) and MB/s with 10 clients x 10 MB
#                               messages with confirms (target >= 1 GB/s)
#   scripts/bench.sh textstamp  text stamps in a 1 KiB JSON template against binary stamps, 1 KiB,
#                               unlimited, on mem:// and NATS, interleaved: CPU-s per million and
#                               the ratio (target <= 1.2x)
#   scripts/bench.sh verdicts   mem:// 64 B unlimited with and without 4 thresholds judged every
#                               interval (--threshold-abort), interleaved: msgs/s and the ratio
#   scripts/bench.sh search     a capacity search with default settings on mem:// capped at 50k msgs/s:
#                               the time it takes and the capacity it finds
#   scripts/bench.sh redis      Redis PUBLISH and XADD, 100 B, 4 connections x 64 in flight: msgbench
#                               against redis-benchmark -P 64, msgs/s and CPU-s per million
#   scripts/bench.sh proxy      `msgbench serve amqp-proxy` (strict, handshake-terminating, as
#                               amqpprox) in front of `serve amqp-sink`: connections/s and MB/s
#                               through it next to the same workloads direct, and the direct
#                               connections/s with --pipeline-handshake (the opt-in shortcut)
#   scripts/bench.sh conns      hold CONNS connections (default 100,000) to Mosquitto, with extra
#                               mosquitto processes on other ports when one cannot hold them all
#                               (its open-file limit); RSS per connection (target <= 10 KiB)
#   scripts/bench.sh nats-conns the same hold over NATS, on as many nats-server processes as
#                               their open-file limit needs (not part of `all`)
#   scripts/bench.sh ws         the rango scenario: 1 NATS publisher at 100 msgs/s relayed by
#                               `msgbench serve ws-broadcast` to WS_CLIENTS (default 10,000)
#                               WebSocket clients; completeness and generator RSS per client.
#                               One server per 15,000 clients (WS_SERVERS); WS_RATE (default
#                               100) messages/s; WS_CLIENTS=100000 WS_RATE=10 is the seed's full size.
#                               WS_GATEWAY=1: rango's whole path instead (AMQP publisher of JSON
#                               events to RabbitMQ's peatio.events.ranger, servers in --gateway
#                               rango mode, clients subscribed to btcusd.trades by URL)
#   scripts/bench.sh zmq        ZeroMQ PUSH/PULL, 64 B, both ends in one msgbench process over
#                               loopback TCP (aim >= 1M msgs/s); PUB/SUB to 2 subscribers; PUSH/PULL
#                               between two msgbench processes
#   scripts/bench.sh http       nginx, 50 connections, closed loop 10 s: msgbench with --io readiness
#                               and --io batched against wrk (Debian package), interleaved:
#                               requests/s and CPU-s per million (issue 25's target: >= 1.3x wrk's
#                               rate at <= 0.6x its CPU); then a fixed rate of half msgbench's
#                               maximum: latency p50/p99
#   scripts/bench.sh window     small windows: MQTT QoS 1 via Mosquitto and NATS request/reply,
#                               10 clients with one message in flight each, --io readiness against
#                               --io batched (targets: MQTT <= 6 CPU-s/M; NATS half today's CPU)
#   scripts/bench.sh ecp        AMQP 1.0 and the ecp preset: (1) plain loop-back (`--ecp-mode amqp`,
#                               3,000-byte durable messages, 2 senders, in-flight 1,000) on
#                               RabbitMQ's AMQP 1.0 plugin and on Artemis: msgs/s and CPU-s per
#                               million (target on RabbitMQ: >= 3,045 msgs/s at <= 30 CPU-s/M,
#                               5x go-mades-bench's 609 msgs/s at 161); (2) endpoint mode through
#                               `msgbench serve ecp-endpoint` on Artemis: msgs/s per stage and
#                               msgbench's CPU-s per million (ECP_MESSAGES: messages per run,
#                               default 100,000, so start-up is a small share)
#   scripts/bench.sh views      the live views never slow the hot path: mem:// 64 B unlimited,
#                               10 s, on a pty (`script`), plain table versus --tui --dashboard
#                               (a client streaming the dashboard's events); runs interleaved;
#                               msgs/s of each and the ratio (target >= 0.95)
#   scripts/bench.sh merge      `msgbench merge` of 4 segments of a 10-minute run with 1 s
#                               intervals (600 intervals each, built from a real 4-segment NATS
#                               run's lines): seconds and peak RSS (target < 2 s, memory
#                               independent of message count)
#   scripts/bench.sh segments   the same NATS workload (4 topics, 1 producer + 1 consumer each,
#                               64 B, unlimited, 10 s) in one process versus 4 segments released
#                               together: msgs/s received (target: segments >= 0.9x single)
#   scripts/bench.sh p2p        the seed's comparison: scenarios/p2p-amqp10.toml (brokerless AMQP
#                               1.0, pre-settled) and scenarios/p2p-zmq.toml (ZeroMQ PUSH/PULL),
#                               1 -> 1, 100 B, unlimited, 5 s, interleaved, RUNS (default 3 here)
#                               runs each; then unsettled AMQP 1.0 once per run too: msgs/s and
#                               CPU-s per million, medians (target: AMQP 1.0 >= 1/4 of ZeroMQ)
#   scripts/bench.sh kafka      Apache Kafka 4.4 (KRaft, scripts/brokers.sh up kafka): 1 producer ->
#                               1 consumer, 1 KiB, unlimited, 10 s, acks=1 and acks=all, a fresh
#                               topic each run: msgs/s sent and received, CPU-s per million
#   scripts/bench.sh kafka-peers  Kafka, 1 KiB, acks=1, 8 partitions: msgbench's producer against
#                               Kafka's ProducerPerformance and its consumer against
#                               ConsumerPerformance (kafka-tools), interleaved: records/s and
#                               CPU-s per million of each client process (KAFKA_RECORDS, 1M)
#   scripts/bench.sh backlog    backlog build and drain (--backlog 256MiB, 1 KiB, producers at
#                               50k msgs/s) on Kafka (8 partitions, 4 group consumers) and
#                               JetStream (file stream, pull consumer): build s, drain s, drain rate
#   scripts/bench.sh memflat    10^7 messages (MEMFLAT_MESSAGES) through each stream driver (Redis
#                               pub/sub and streams, JetStream, Kafka), 64 B, unlimited: msgbench's
#                               RSS at 10%, 50% and the end (target: flat)
#   scripts/bench.sh jetstream  NATS JetStream (nats+js://) 1 producer -> 1 pull consumer, 256 B,
#                               file (1 GiB) and memory (768 MiB) streams, PubAcks with a window of 1000, unlimited,
#                               5 s, against a nats-server of its own (JetStream on, store in a
#                               temporary directory): msgs/s and CPU-s per million messages of
#                               msgbench (/usr/bin/time) and of nats-server (/proc/PID/stat before
#                               and after) in the same run (target: msgbench <= 0.5x the server)
#   scripts/bench.sh sizes      size distributions on mem://: fixed, uniform and log-normal of one mean
#   scripts/bench.sh groups     mem:// 4 -> 4 at 400,000 msgs/s as one group and as four groups
#                               ([[groups]]): the per-message cost of groups (GROUPS_RATE)
#   scripts/bench.sh churn      CHURN_CONNS (default 5,000) connections held on Mosquitto, CHURN_RATE
#                               (default 500) a second dropped and reopened at once: drops, back,
#                               failed, reconnect latency, publishes missed, generator CPU
#   scripts/bench.sh journeys   JOURNEY_USERS (default 2,000) MQTT virtual users on a journey
#                               (connect, publish 10 at 20/s, disconnect, think, again) for 10 s:
#                               connections/s, messages, connect latency, CPU per pass
#   scripts/bench.sh vus        CONNS (default 100,000) MQTT virtual users held on Mosquitto, arriving
#                               by Poisson at 5,000/s, each publishing every 10 s: RSS per user
#                               (target <= 10 KiB) (not part of `all`: `conns` is its constant twin)
#   scripts/bench.sh reconnect  a reconnect storm: RECONNECT_CONNS (default 5,000) connections held on
#                               Mosquitto, all dropped at t = 5 s and reconnecting at once: time until
#                               all were back, reconnect latency from the drop, failures
#
# RUNS (default 5) sets the repetitions. The NATS benchmark starts nats-server via
# scripts/brokers.sh; if the Go `nats` CLI is on PATH (or in ~/.cache/gobin), `nats bench`
# runs in the same session for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target}
RUNS_SET=${RUNS:-}
RUNS=${RUNS:-5}
# MSGBENCH_BIN benchmarks a binary built earlier (no build).
if [ -n "${MSGBENCH_BIN:-}" ]; then
  B=$MSGBENCH_BIN
else
  cargo build --release --features kafka --locked -q
  B="$CARGO_TARGET_DIR/release/msgbench"
fi
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

# mqtt_run ARGS... -> prints "sent_per_s received_per_s cpu_s_per_million_sent lost p99_publish_us
#   tcp_segments_in tcp_segments_out tcp_bare_acks e2e_p50_us e2e_p99_us" (segments per message sent)
mqtt_run() {
  local out tm
  out=$(mktemp); tm=$(mktemp)
  /usr/bin/time -f "%U %S %M" -o "$tm" "$B" run "$@" --no-output --quiet --format json >"$out"
  python3 - "$out" "$tm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
u, s, rss = open(sys.argv[2]).read().split()[-3:]
m = r["result"]
sent = sum(p["counters"]["sent"] for p in r["phases"])
cpu = float(u) + float(s)
t = r.get("tcp") or {}
seg = lambda n: f'{n / max(sent, 1):.2f}'
g = lambda k: t.get(k, 0)
tcp = f'{seg(g("segs_in"))} {seg(g("segs_out"))} {seg(g("segs_out") - g("data_segs_out"))}'
e2e = m.get("e2e") or {}
lat = f'{e2e.get("p50", 0) / 1e3:.0f} {e2e.get("p99", 0) / 1e3:.0f}'
print(f'{m["sent_per_s"]:.0f} {m["received_per_s"]:.0f} {cpu / max(sent, 1) * 1e6:.2f} {r["integrity"]["lost"]} {m["publish"]["p99"] / 1e3:.0f} {tcp} {lat}')
PY
  rm -f "$out" "$tm"
}

bench_mqtt() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  # Two brokers: the test mosquitto (set_tcp_nodelay true: every message its own TCP segment,
  # lowest latency) and a mosquitto as shipped (Nagle on: at high rates several messages share a
  # segment, so subscribers take fewer wake-ups and reads).
  local dir pid port qos subs every v broker url
  dir=$(mktemp -d)
  read -r pid port < <(extra_mosquitto "$dir/default" "$(ulimit -n)")
  for broker in "nodelay:$MSGBENCH_IT_MQTT_URL" "default:mqtt://127.0.0.1:$port"; do
    url=${broker#*:}
    for qos in 0 1; do
      # -c 0: publishing only, as the Go client the issue compares with was measured. QoS 1
      # subscribers also run with batched acknowledgements (--ack-every 16).
      local variants="1:1 0:1"
      [ "$qos" = 1 ] && variants="1:1 1:16 0:1"
      for v in $variants; do
        subs=${v%%:*}; every=${v#*:}
        local ack=""; [ "$qos" = 1 ] && [ "$subs" != 0 ] && ack=", --ack-every $every"
        echo "== MQTT QoS $qos via mosquitto (${broker%%:*}): 10 topics, 1 publisher + $subs subscriber(s) each, 100 B, unlimited$ack ($RUNS runs)"
        local cpus=() rates=()
        for _ in $(seq "$RUNS"); do
          read -r sent recv cpu lost p99 seg_in seg_out bare _ _ < <(mqtt_run "$url" --qos "$qos" --topics 10 \
            --topic 'bench/q'"$qos"'/{i}' -c "$subs" --size 100 --max-in-flight 1000 --warmup 1s --duration 5s --drain 15s \
            --ack-every "$every")
          echo "  run: sent $sent msgs/s, received $recv msgs/s, $cpu CPU-s per million sent (whole msgbench process), lost $lost, publish p99 ${p99} us; TCP segments per message sent: $seg_in in, $seg_out out ($bare bare ACKs)"
          cpus+=("$cpu"); rates+=("$sent")
        done
        echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s sent, $(printf '%s\n' "${cpus[@]}" | median) CPU-s per million"
      done
    done
    # What batched acknowledgements cost at a steady rate: the broker with Nagle on holds its
    # next delivery to a subscriber until the previous one is acknowledged.
    for every in 1 16; do
      local p50s=() p99s=()
      for _ in $(seq "$RUNS"); do
        read -r _ _ cpu lost _ _ _ _ e50 e99 < <(mqtt_run "$url" --qos 1 --topics 10 \
          --topic 'bench/q1/{i}' -c 1 --size 100 --rate 20000 --warmup 1s --duration 5s --ack-every "$every")
        p50s+=("$e50"); p99s+=("$e99")
      done
      echo "== MQTT QoS 1 via mosquitto (${broker%%:*}), 10 + 10 clients, 20,000 msgs/s, --ack-every $every: median e2e p50 $(printf '%s\n' "${p50s[@]}" | median) us, p99 $(printf '%s\n' "${p99s[@]}" | median) us ($RUNS runs)"
    done
  done
  kill "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

# MQTT over WebSocket against plain MQTT on the same broker, interleaved: what the tunnel
# costs (masking, frame headers, the upgrade) on RabbitMQ's web_mqtt and Artemis's MQTT acceptor.
bench_mqtt_ws() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local art_ws=$MSGBENCH_IT_ARTEMIS_WS_MQTT_URL pair name plain ws url
  for pair in "rabbitmq|$MSGBENCH_IT_RMQ_MQTT_URL|$MSGBENCH_IT_RMQ_WS_MQTT_URL" \
    "artemis|${art_ws/mqtt+ws:/mqtt:}|$art_ws"; do
    IFS='|' read -r name plain ws <<<"$pair"
    plain=${plain%/mqtt}
    echo "== MQTT QoS 1 via $name, plain against WebSocket: 10 topics, 1 publisher + 1 subscriber each, 100 B, unlimited ($RUNS runs, interleaved)"
    local rp=() cp=() rw=() cw=()
    for _ in $(seq "$RUNS"); do
      for url in "$plain" "$ws"; do
        read -r sent recv cpu lost p99 _ < <(mqtt_run "$url" --qos 1 --topics 10 --topic 'bench/ws/{i}' \
          -c 1 --size 100 --max-in-flight 100 --warmup 1s --duration 5s --drain 15s)
        echo "  run ${url%%://*}: sent $sent msgs/s, received $recv msgs/s, $cpu CPU-s per million sent, lost $lost, publish p99 ${p99} us"
        if [ "$url" = "$plain" ]; then rp+=("$sent"); cp+=("$cpu"); else rw+=("$sent"); cw+=("$cpu"); fi
      done
    done
    echo "  median plain: $(printf '%s\n' "${rp[@]}" | median) msgs/s at $(printf '%s\n' "${cp[@]}" | median) CPU-s per million; WebSocket: $(printf '%s\n' "${rw[@]}" | median) msgs/s at $(printf '%s\n' "${cw[@]}" | median)"
  done
}

bench_demo() {
  echo "== embedded broker (msgbench run, no target), 1,000 msgs/s, 10 s ($RUNS runs)"
  local p99s=()
  for _ in $(seq "$RUNS"); do
    local out; out=$(mktemp)
    "$B" run --rate 1000 --duration 10s --no-output --quiet --format json >"$out" 2>/dev/null
    p99=$(python3 -c "import json,sys; m=json.load(open('$out'))['result']['e2e']; print(f\"{m['p50']/1e3:.0f} {m['p99']/1e3:.0f} {m['max']/1e3:.0f}\")")
    echo "  run: e2e p50/p99/max ${p99// //} us"
    p99s+=("$(echo "$p99" | cut -d' ' -f2)")
    rm -f "$out"
  done
  echo "  median e2e p99: $(printf '%s\n' "${p99s[@]}" | median) us (target < 2000)"
}

bench_storm() {
  local port; port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$B" serve mqtt --quiet --listen "127.0.0.1:$port" & local pid=$!
  sleep 0.5
  echo "== connect storm (connect + CONNECT/CONNACK + DISCONNECT) against msgbench serve mqtt, 64 at a time, 5 s ($RUNS runs)"
  local rates=()
  for _ in $(seq "$RUNS"); do
    local out; out=$(mktemp)
    "$B" run "mqtt://127.0.0.1:$port" --storm --concurrency 64 --duration 5s --no-output --quiet --format json >"$out"
    r=$(python3 -c "import json; r=json.load(open('$out')); c=r['connections']; m=r['result']['connect']; f=r['result']['counters'].get('connect_failures',{}); print(f\"{c['connections_per_s']:.0f} {m['p50']/1e3:.0f} {m['p99']/1e3:.0f} {sum(f.values())}\")")
    read -r cps p50 p99 failed <<<"$r"
    echo "  run: $cps connections/s, handshake p50 ${p50} us p99 ${p99} us, failed $failed"
    rates+=("$cps"); rm -f "$out"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "  median: $(printf '%s\n' "${rates[@]}" | median) connections/s (aim >= 10,000)"
}

# free_port: a free loopback TCP port.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# extra_mosquitto PREFIX NOFILE [CONF_LINE]: starts a mosquitto of ours on a free loopback port
# (anonymous, no persistence, config and log at PREFIX.*), waits until it listens, prints
# "PID PORT". Stop it by PID.
# wait_port PORT: returns once something listens on 127.0.0.1:PORT (at most 5 s).
wait_port() {
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done
}

extra_mosquitto() {
  local prefix=$1 nofile=$2 extra=${3:-} port pid
  port=$(free_port)
  printf '%s\n' "persistence false" "max_keepalive 65535" "log_dest stderr" \
    "connection_messages false" "max_inflight_messages 0" "max_queued_messages 100000" ${extra:+"$extra"} \
    "listener $port 127.0.0.1" "max_connections -1" "allow_anonymous true" >"$prefix.conf"
  (ulimit -n "$nofile" && exec mosquitto -c "$prefix.conf") >>"$prefix.log" 2>&1 &
  pid=$!
  wait_port "$port"
  echo "$pid $port"
}

bench_conns() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local hard mpid mlim n per pids=() url dir
  hard=$(ulimit -Hn)
  mpid=$(cat "${MSGBENCH_BROKERS_DIR:-$HOME/.cache/msgbench-brokers}/mosquitto.pid")
  mlim=$(awk '/Max open files/ {print $4}' "/proc/$mpid/limits")
  n=${CONNS:-100000}
  # One mosquitto holds at most its open-file limit (less a margin): beyond that, more
  # mosquitto processes on other ports share the connections (msgbench spreads clients over the
  # URL's hosts round robin). msgbench itself holds what its limit does not allow in io_uring
  # tables (it says so in a warning).
  per=$((mlim - 500))
  url=$MSGBENCH_IT_MQTT_URL
  dir=$(mktemp -d)
  local k=1 pid port
  while [ $((k * per)) -lt "$n" ]; do
    read -r pid port < <(extra_mosquitto "$dir/m$k" "$mlim" "set_tcp_nodelay true")
    pids+=("$pid"); url="$url,127.0.0.1:$port"
    k=$((k + 1))
  done
  echo "== hold $n MQTT connections to $k mosquitto process(es) (open-file limit $mlim each; msgbench's hard limit $hard), 5,000/s ramp, held 20 s, keep-alive 60 s, 4 source addresses"
  local out; out=$(mktemp)
  # shellcheck disable=SC2086 # CONNS_EXTRA is a list of flags
  "$B" run "$url" --connections "$n" --connect-rate 5000 --hold 20s \
    --source-addrs 127.0.0.1-127.0.0.4 --keep-alive 60s ${CONNS_EXTRA:-} --no-output --quiet --format json >"$out" || true
  [ "${#pids[@]}" -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$dir"
  conns_summary "$out"
}

# conns_summary FILE: the figures of a connection run's JSON report.
conns_summary() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["connections"]; m = r["result"]
f = m["counters"].get("connect_failures", {})
print(f'  opened {m["counters"].get("connects", 0)}, peak held {c["peak_held"]}, {c["connections_per_s"]:.0f} connections/s, '
      f'connect p50 {m["connect"]["p50"]/1e3:.0f} us p99 {m["connect"]["p99"]/1e3:.0f} us, failed {sum(f.values())}, dropped {m["counters"].get("dropped", 0)}')
print(f'  generator RSS {c["rss_baseline_bytes"]/2**20:.1f} MiB -> {c["rss_peak_bytes"]/2**20:.1f} MiB: '
      f'{c["rss_per_connection_bytes"]/1024:.2f} KiB per held connection (target <= 10 KiB)')
for w in r.get("warnings", []):
    print(f'  warning: {w}')
PY
  rm -f "$1"
}

# The same hold over NATS: as many nats-server processes as their open-file limit needs.
bench_nats_conns() {
  local hard n per k=0 pids=() url="" dir port
  hard=$(ulimit -Hn)
  n=${CONNS:-100000}
  per=$((hard - 500))
  dir=$(mktemp -d)
  while [ $((k * per)) -lt "$n" ]; do
    port=$(free_port)
    (ulimit -n "$hard" && exec nats-server -a 127.0.0.1 -p "$port" -l "$dir/nats$k.log") >/dev/null 2>&1 &
    pids+=("$!"); url="${url:+$url,}nats://127.0.0.1:$port"
    wait_port "$port"
    k=$((k + 1))
  done
  echo "== hold $n NATS connections to $k nats-server process(es) (open-file limit $hard each, as msgbench's), 5,000/s ramp, held 20 s, 4 source addresses"
  local out; out=$(mktemp)
  "$B" run "$url" --connections "$n" --connect-rate 5000 --hold 20s \
    --source-addrs 127.0.0.1-127.0.0.4 --no-output --quiet --format json >"$out" || true
  kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$dir"
  conns_summary "$out"
}

bench_amqp() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  echo "== AMQP 0-9-1 via RabbitMQ: 1 producer, 1 consumer, 1 KB, confirms (window 100), 10 s; msgbench and PerfTest interleaved ($RUNS runs each)"
  local ours=() theirs=() rates=() prates=()
  for _ in $(seq "$RUNS"); do
    local out tm; out=$(mktemp); tm=$(mktemp)
    /usr/bin/time -f "%U %S" -o "$tm" "$B" run "$MSGBENCH_IT_AMQP_URL" --confirm --max-in-flight 100 \
      --prefetch 0 --size 1000 --warmup 0s --duration 10s --topic bench.amqp --no-output --quiet --format json >"$out"
    read -r rate cpu < <(python3 - "$out" "$tm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); u, s = open(sys.argv[2]).read().split()[-2:]
sent = sum(p["counters"]["sent"] for p in r["phases"])
print(f'{r["result"]["sent_per_s"]:.0f} {(float(u) + float(s)) / max(sent, 1) * 1e6:.2f}')
PY
)
    echo "  msgbench: $rate msgs/s, $cpu CPU-s per million"
    ours+=("$cpu"); rates+=("$rate")
    local log; log=$(mktemp)
    scripts/perftest.sh --uri "$MSGBENCH_IT_AMQP_URL" -x 1 -y 1 -s 1000 --confirm 100 -z 10 >"$log" 2>&1 || true
    read -r prate pcpu < <(python3 - "$log" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
rate = float(re.search(r"sending rate avg: (\d+)", t).group(1))
m = re.search(r"CPU ([\d.]+) s user \+ ([\d.]+) s system, ([\d.]+) s elapsed", t)
cpu = float(m.group(1)) + float(m.group(2))
print(f"{rate:.0f} {cpu / (rate * 10) * 1e6:.2f}")
PY
)
    echo "  PerfTest: $prate msgs/s, $pcpu CPU-s per million (JVM start included)"
    theirs+=("$pcpu"); prates+=("$prate")
    rm -f "$out" "$tm" "$log"
  done
  local a b
  a=$(printf '%s\n' "${ours[@]}" | median); b=$(printf '%s\n' "${theirs[@]}" | median)
  echo "  median: msgbench $(printf '%s\n' "${rates[@]}" | median) msgs/s at $a CPU-s/M; PerfTest $(printf '%s\n' "${prates[@]}" | median) msgs/s at $b CPU-s/M; ratio $(python3 -c "print(f'{$a/$b:.2f}')") (target <= 0.3)"
}

bench_kafka() {
  scripts/brokers.sh up kafka >/dev/null
  eval "$(scripts/brokers.sh env)"
  local acks
  for acks in 1 all; do
    echo "== Kafka 1 producer -> 1 consumer, 1 KiB, unlimited, 10 s, acks=$acks ($RUNS runs)"
    local rates=() recvs=() cpus=()
    for i in $(seq "$RUNS"); do
      local out tm; out=$(mktemp); tm=$(mktemp)
      /usr/bin/time -f "%U %S" -o "$tm" "$B" run "$MSGBENCH_IT_KAFKA" --acks "$acks" --size 1KiB \
        --warmup 1s --duration 10s --drain 10s --topic "bench.kafka.$acks.$$.$i" --no-output --quiet \
        --format json >"$out"
      read -r rate recv cpu lost < <(python3 - "$out" "$tm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); u, s = open(sys.argv[2]).read().split()[-2:]
sent = sum(p["counters"]["sent"] for p in r["phases"])
print(f'{r["result"]["sent_per_s"]:.0f} {r["result"]["received_per_s"]:.0f} {(float(u) + float(s)) / max(sent, 1) * 1e6:.2f} {r["integrity"]["lost"]}')
PY
)
      echo "  run: $rate msgs/s sent, $recv msgs/s received, $cpu CPU-s per million (msgbench process), lost $lost"
      rates+=("$rate"); recvs+=("$recv"); cpus+=("$cpu")
      rm -f "$out" "$tm"
    done
    echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s sent, $(printf '%s\n' "${recvs[@]}" | median) msgs/s received, $(printf '%s\n' "${cpus[@]}" | median) CPU-s per million"
  done
}

# bench_kafka_peers: msgbench against Kafka's own ProducerPerformance and ConsumerPerformance
# (the kafka-tools jar brokers.sh fetched), interleaved, the same 1 KiB records and topics of 8
# partitions. Producers: N records, acks=1, unlimited, linger 5 ms and 1 MB batches for both.
# Consumers: each reads the N records the other tool's producer wrote, from the beginning
# (msgbench counts them as foreign messages; its rate is taken from 100 ms intervals, from the
# first delivery to the last). CPU: user+system of each client process (the JVM's start-up
# included, as a user running the tool pays it).
bench_kafka_peers() {
  scripts/brokers.sh up kafka >/dev/null
  eval "$(scripts/brokers.sh env)"
  local libs="${MSGBENCH_BROKERS_DIR:-$HOME/.cache/msgbench-brokers}/kafka/libs/*" boot=${MSGBENCH_IT_KAFKA#kafka://}
  local n=${KAFKA_RECORDS:-1000000}
  kjava() { java -Xmx1g -cp "$libs" "$@"; }
  cpu_of() { python3 -c "u,s=open('$1').read().split()[-2:]; print(f'{(float(u)+float(s))/$2*1e6:.2f}')"; }
  echo "== Kafka 1 KiB records, acks=1, one topic of 8 partitions, $n records: msgbench against ProducerPerformance and ConsumerPerformance ($RUNS runs, interleaved)"
  local mp=() mpc=() jp=() jpc=() mc=() mcc=() jc=() jcc=()
  for i in $(seq "$RUNS"); do
    local ours="bench.kpeer.m.$$.$i" theirs="bench.kpeer.j.$$.$i" tm out
    tm=$(mktemp); out=$(mktemp)
    kjava org.apache.kafka.tools.TopicCommand --bootstrap-server "$boot" --create --topic "$theirs" \
      --partitions 8 --replication-factor 1 >/dev/null
    /usr/bin/time -f "%U %S" -o "$tm" "$B" run "$MSGBENCH_IT_KAFKA" --topic "$ours" --partitions 8 -c 0 \
      -n "$n" --size 1KiB --acks 1 --linger 5ms --batch-size 1000000 --max-in-flight 32768 --warmup 0s --no-output --quiet --format json >"$out"
    mp+=("$(python3 -c "import json; print(round(json.load(open('$out'))['result']['sent_per_s']))")")
    mpc+=("$(cpu_of "$tm" "$n")")
    local line
    line=$(/usr/bin/time -f "%U %S" -o "$tm" java -Xmx1g -cp "$libs" org.apache.kafka.tools.ProducerPerformance \
      --topic "$theirs" --num-records "$n" --record-size 1024 --throughput -1 \
      --producer-props "bootstrap.servers=$boot" acks=1 linger.ms=5 batch.size=1000000 2>/dev/null | tail -1)
    jp+=("$(echo "$line" | sed -E 's/.* records sent, ([0-9.]+) records\/sec.*/\1/' | cut -d. -f1)")
    jpc+=("$(cpu_of "$tm" "$n")")
    echo "  producer run $i: msgbench ${mp[-1]} records/s at ${mpc[-1]} CPU-s/M; ProducerPerformance ${jp[-1]} records/s at ${jpc[-1]} CPU-s/M"
    # Consumers: ConsumerPerformance reads msgbench's records, msgbench reads ProducerPerformance's.
    # msgbench's run lasts KAFKA_CONSUME_S (8 s): it reads the million in about 2 s, and its CPU
    # counts the whole run, idle time included (0.02 CPU-s a second here), as ConsumerPerformance's
    # counts its JVM's start.
    line=$(/usr/bin/time -f "%U %S" -o "$tm" java -Xmx1g -cp "$libs" org.apache.kafka.tools.ConsumerPerformance \
      --bootstrap-server "$boot" --topic "$ours" --num-records "$n" --group "bench.cp.$$.$i" --hide-header 2>/dev/null | tail -1)
    # start, end, MB, MB/s, nMsg, nMsg/s, rebalance ms, fetch ms, fetch MB/s, fetch nMsg/s
    jc+=("$(echo "$line" | awk -F', *' '{printf "%.0f", $10}')")
    jcc+=("$(cpu_of "$tm" "$n")")
    /usr/bin/time -f "%U %S" -o "$tm" "$B" run "$MSGBENCH_IT_KAFKA" --topic "$theirs" -p 1 --rate 1 -c 1 \
      --offset earliest --warmup 0s --duration "${KAFKA_CONSUME_S:-8}s" --drain 0s --tick 100ms --no-output --quiet --format json >"$out" || true
    read -r rate got < <(python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
# ProducerPerformance's records carry no msgbench stamp: counted as foreign deliveries. The
# span is that of the intervals that read them (msgbench's own 1 msg/s lasts the whole run).
iv = [i for i in r["intervals"] if i["counters"]["foreign"] > 0]
got = sum(i["counters"]["foreign"] for i in iv)
span = iv[-1]["end_s"] - iv[0]["start_s"] if iv else 0
print(f'{got / span if span else 0:.0f} {got}')
PY
)
    mc+=("$rate"); mcc+=("$(cpu_of "$tm" "$got")")
    echo "  consumer run $i: msgbench $rate records/s ($got read) at ${mcc[-1]} CPU-s/M; ConsumerPerformance ${jc[-1]} records/s (fetch) at ${jcc[-1]} CPU-s/M"
    kjava org.apache.kafka.tools.TopicCommand --bootstrap-server "$boot" --delete --topic "$ours" >/dev/null 2>&1 || true
    kjava org.apache.kafka.tools.TopicCommand --bootstrap-server "$boot" --delete --topic "$theirs" >/dev/null 2>&1 || true
    rm -f "$tm" "$out"
  done
  local a b
  a=$(printf '%s\n' "${mpc[@]}" | median); b=$(printf '%s\n' "${jpc[@]}" | median)
  echo "  producer median: msgbench $(printf '%s\n' "${mp[@]}" | median) records/s at $a CPU-s/M; ProducerPerformance $(printf '%s\n' "${jp[@]}" | median) records/s at $b CPU-s/M; CPU ratio $(python3 -c "print(f'{$a/$b:.2f}')") (target: at least its rate at <= 0.5x its CPU)"
  a=$(printf '%s\n' "${mcc[@]}" | median); b=$(printf '%s\n' "${jcc[@]}" | median)
  echo "  consumer median: msgbench $(printf '%s\n' "${mc[@]}" | median) records/s at $a CPU-s/M; ConsumerPerformance $(printf '%s\n' "${jc[@]}" | median) records/s at $b CPU-s/M; CPU ratio $(python3 -c "print(f'{$a/$b:.2f}')") (target: at least its rate at <= 0.5x its CPU)"
}

# js_delete NAME...: deletes JetStream streams a benchmark created (their storage is reserved
# until then), with the JetStream API over a plain NATS connection.
js_delete() {
  python3 - "${MSGBENCH_IT_NATS_URL#nats://}" "$@" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
s.recv(4096)  # INFO
out = b"CONNECT {}\r\n"
for name in sys.argv[2:]:
    out += b"PUB $JS.API.STREAM.DELETE." + name.encode() + b" 0\r\n\r\n"
s.sendall(out + b"PING\r\n")
buf = b""
while b"PONG" not in buf:
    buf += s.recv(4096)
PY
}

bench_backlog() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  echo "== backlog build and drain: 1 KiB, producers at 50,000 msgs/s, --backlog 256MiB, then released while producers go on ($RUNS runs each)"
  local out; out=$(mktemp)
  local kind
  for kind in kafka jetstream; do
    local builds=() drains=() rates=()
    for i in $(seq "$RUNS"); do
      if [ "$kind" = kafka ]; then
        "$B" run "$MSGBENCH_IT_KAFKA" --topic "bench.backlog.$$.$i" --partitions 8 -p 4 -c 4 --queue-group g \
          --size 1KiB --rate 50k --backlog 256MiB --duration 20s --drain 30s --no-output --quiet --format json >"$out"
      else
        "$B" run "$MSGBENCH_IT_NATS_JS_URL?stream=BACKLOG_$$_$i&storage=file&max_bytes=1GiB" --topic "bench.backlog.$$.$i" \
          -p 1 -c 1 --size 1KiB --rate 50k --backlog 256MiB --duration 20s --drain 30s --no-output --quiet --format json >"$out"
      fi
      read -r build drain rate lost < <(python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); b = r.get("backlog") or {}
print(f'{b.get("build_s", 0):.2f} {b.get("drain_s") or 0:.2f} {b.get("drain_rate") or 0:.0f} {r["integrity"]["lost"]}')
PY
)
      echo "  $kind run $i: built in $build s, drained in $drain s at $rate deliveries/s, lost $lost"
      [ "$kind" = jetstream ] && js_delete "BACKLOG_$$_$i"
      builds+=("$build"); drains+=("$drain"); rates+=("$rate")
    done
    echo "  $kind median: built in $(printf '%s\n' "${builds[@]}" | median) s, drained in $(printf '%s\n' "${drains[@]}" | median) s at $(printf '%s\n' "${rates[@]}" | median) deliveries/s"
  done
  rm -f "$out"
}

# rss_series ARGS...: runs msgbench ARGS, samples its resident memory every second, and prints
# "MiB at 10% / 50% / 100% of the samples, messages received".
rss_series() {
  local out samples; out=$(mktemp); samples=$(mktemp)
  "$B" run "$@" --no-output --quiet --format json >"$out" & local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null >>"$samples" || true
    sleep 1
  done
  wait "$pid" || true
  python3 - "$out" "$samples" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = [int(x) for x in open(sys.argv[2]).read().split()]
pick = lambda f: s[min(len(s) - 1, int(len(s) * f))] / 1024 if s else 0
got = sum(p["counters"]["received"] for p in r["phases"])
print(f"{pick(0.1):.1f} {pick(0.5):.1f} {pick(0.999):.1f} {got}")
PY
  rm -f "$out" "$samples"
}

bench_memflat() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local n=${MEMFLAT_MESSAGES:-10000000}
  echo "== memory over $n messages, 1 producer -> 1 consumer, 64 B, unlimited: msgbench's RSS at 10%, 50% and the end of the run"
  local name url
  for name in ${MEMFLAT_DRIVERS:-redis-pubsub redis-streams jetstream kafka}; do
    case $name in
      redis-pubsub) url="$MSGBENCH_IT_REDIS_URL" ;;
      redis-streams) url="$MSGBENCH_IT_REDIS_URL?mode=streams&maxlen=100000" ;;
      jetstream) url="$MSGBENCH_IT_NATS_JS_URL?stream=MEMFLAT_$$&storage=file&max_bytes=1GiB" ;;
      kafka) url="$MSGBENCH_IT_KAFKA" ;;
    esac
    read -r a b c got < <(rss_series "$url" --topic "bench.memflat.$name.$$" --size 64 -n "$n" --warmup 0s --drain 30s)
    echo "  $name: RSS $a MiB at 10%, $b MiB at 50%, $c MiB at the end; $got messages received"
    [ "$name" = jetstream ] && js_delete "MEMFLAT_$$"
  done
}

bench_sink() {
  local port; port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$B" serve amqp-sink --quiet --listen "127.0.0.1:$port" & local pid=$!
  sleep 0.5
  echo "== AMQP against msgbench serve amqp-sink ($RUNS runs each)"
  local cps=() mbs=()
  for _ in $(seq "$RUNS"); do
    local out; out=$(mktemp)
    "$B" run "amqp://127.0.0.1:$port" --storm --concurrency 64 --duration 5s --no-output --quiet --format json >"$out"
    cps+=("$(python3 -c "import json; print(round(json.load(open('$out'))['connections']['connections_per_s']))")")
    "$B" run "amqp://127.0.0.1:$port" -p 10 -c 0 --size 10MB --confirm --max-in-flight 4 --warmup 1s --duration 5s \
      --no-output --quiet --format json >"$out"
    mbs+=("$(python3 -c "import json; print(round(json.load(open('$out'))['result']['sent_mb_per_s']))")")
    echo "  run: ${cps[-1]} connections/s (connect, start/tune/open, channel, close); ${mbs[-1]} MB/s (10 x 10 MB, confirmed)"
    rm -f "$out"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "  median: $(printf '%s\n' "${cps[@]}" | median) connections/s (target >= 20,000), $(printf '%s\n' "${mbs[@]}" | median) MB/s (target >= 1,000)"
}

bench_textstamp() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local tpl='{"market":"btcusd","event":"trades","id":"{{stamp}}","seq":{{seq}},"price":"42000.5","amount":"0.013","side":"buy","pad":"{{pad}}"}'
  local target
  for target in mem://textstamp "$MSGBENCH_IT_NATS_URL"; do
    echo "== stamps on ${target%%:*}: binary versus text in a 1 KiB JSON template, 1 KiB, unlimited, 5 s ($RUNS runs, interleaved)"
    local bin=() txt=() brate=() trate=()
    for _ in $(seq "$RUNS"); do
      read -r rate cpu _ lost < <(measure "$target" --size 1KiB --warmup 1s --duration 5s)
      echo "  binary: $rate msgs/s, $cpu CPU-s per million, lost $lost"; bin+=("$cpu"); brate+=("$rate")
      read -r rate cpu _ lost < <(measure "$target" --size 1KiB --payload "$tpl" --warmup 1s --duration 5s)
      echo "  text:   $rate msgs/s, $cpu CPU-s per million, lost $lost"; txt+=("$cpu"); trate+=("$rate")
    done
    local b t
    b=$(printf '%s\n' "${bin[@]}" | median); t=$(printf '%s\n' "${txt[@]}" | median)
    echo "  median: binary $(printf '%s\n' "${brate[@]}" | median) msgs/s at $b CPU-s/M; text $(printf '%s\n' "${trate[@]}" | median) msgs/s at $t CPU-s/M; ratio $(python3 -c "print(f'{$t/$b:.2f}')") (target <= 1.2)"
  done
}

bench_verdicts() {
  echo "== thresholds cost nothing on the hot path: mem:// 64 B unlimited, 5 s, plain versus 4 thresholds judged every interval (--threshold-abort) ($RUNS runs, interleaved)"
  local plain=() judged=()
  for _ in $(seq "$RUNS"); do
    read -r rate cpu _ _ < <(measure mem://verdicts --size 64 --warmup 1s --duration 5s)
    echo "  plain:  $rate msgs/s, $cpu CPU-s per million"; plain+=("$rate")
    read -r rate cpu _ _ < <(measure mem://verdicts --size 64 --warmup 1s --duration 5s --threshold-abort \
      --threshold 'e2e.p99 < 10s' --threshold 'received_per_s >= 1' --threshold 'errors == 0' --threshold 'lost == 0')
    echo "  judged: $rate msgs/s, $cpu CPU-s per million"; judged+=("$rate")
  done
  local a b
  a=$(printf '%s\n' "${plain[@]}" | median); b=$(printf '%s\n' "${judged[@]}" | median)
  echo "  median: plain $a msgs/s, judged $b msgs/s, ratio $(python3 -c "print(f'{$b/$a:.3f}')") (target: 1 within noise)"
}

# Issue 24's virtual users: the connection hold with Poisson arrivals and every device
# publishing once per 10 s.
bench_vus() {
  CONNS_EXTRA="--connect-arrival poisson --publish-interval 10s" bench_conns
}

bench_reconnect() {
  scripts/brokers.sh up mosquitto >/dev/null
  eval "$(scripts/brokers.sh env)"
  local n=${RECONNECT_CONNS:-5000}
  echo "== reconnect storm: $n connections held on Mosquitto (2,000/s), all dropped at t = 5 s and reconnecting at once ($RUNS runs)"
  for _ in $(seq "$RUNS"); do
    local out
    out=$(mktemp)
    "$B" run "$MSGBENCH_IT_MQTT_URL" --connections "$n" --connect-rate 2000 --hold 8s --reconnect-at 5s \
      --publish-interval 1s --no-output --quiet --format json >"$out"
    python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["connections"]["reconnect"]
l = r["latency"]
settled = "not settled" if r["settled_s"] is None else f'all settled in {r["settled_s"]:.3f} s'
print(f'  {r["dropped"]} dropped, {r["back"]} back, {r["failed"]} failed, {settled}; reconnect latency p50 {l["p50"]/1e6:.1f} ms, p99 {l["p99"]/1e6:.1f} ms, max {l["max"]/1e6:.1f} ms')
PY
    rm -f "$out"
  done
}

bench_churn() {
  scripts/brokers.sh up mosquitto >/dev/null
  eval "$(scripts/brokers.sh env)"
  local n=${CHURN_CONNS:-5000} rate=${CHURN_RATE:-500}
  echo "== churn: $n connections held on Mosquitto (2,000/s), $rate a second dropped and reopened at once for a 10 s hold, each publishing every 1 s ($RUNS runs)"
  for _ in $(seq "$RUNS"); do
    local out
    out=$(mktemp)
    "$B" run "$MSGBENCH_IT_MQTT_URL" --connections "$n" --connect-rate 2000 --hold 10s --churn "$rate" \
      --publish-interval 1s --no-output --quiet --format json >"$out"
    python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["connections"]; ch = c["churn"]; l = ch["latency"]
cpu = sum(p["cpu_s"] for p in r["phases"])
print(f'  {ch["dropped"]} dropped at {ch["rate"]:.0f}/s, {ch["back"]} back, {ch["failed"]} failed, {ch["skipped"]} skipped; reconnect latency p50 {l["p50"]/1e6:.2f} ms, p99 {l["p99"]/1e6:.2f} ms; {c.get("publishes_missed", 0)} publishes missed; peak held {c["peak_held"]}; generator {cpu:.2f} CPU-s')
PY
    rm -f "$out"
  done
}

bench_journeys() {
  scripts/brokers.sh up mosquitto >/dev/null
  eval "$(scripts/brokers.sh env)"
  local n=${JOURNEY_USERS:-2000}
  echo "== journeys: $n MQTT virtual users on Mosquitto, Poisson arrivals at 1,000/s, each for 10 s: connect, publish 10 at 20/s, disconnect, think exp:200ms, again ($RUNS runs)"
  for _ in $(seq "$RUNS"); do
    local out
    out=$(mktemp)
    "$B" run "$MSGBENCH_IT_MQTT_URL" --connections "$n" --connect-rate 1000 --connect-arrival poisson \
      --journey "connect; publish 10 at 20/s; disconnect; sleep exp:200ms" --journey-repeat 0 --duration 10s \
      --no-output --quiet --format json >"$out"
    python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["connections"]
tot = lambda k: sum(p["counters"].get(k, 0) for p in r["phases"])
cpu = sum(p["cpu_s"] for p in r["phases"])
m = next(p for p in r["phases"] if p["phase"] == "measure")
l = m["connect"]
conns, sent = tot("connects"), tot("sent")
print(f'  {conns} connections ({conns / 10:.0f}/s), {tot("closes")} closed, {sent} messages ({sent / 10:.0f}/s), {tot("dropped")} dropped; connect p50 {l["p50"]/1e6:.2f} ms, p99 {l["p99"]/1e6:.2f} ms; generator {cpu:.2f} CPU-s = {cpu / max(conns, 1) * 1e3:.2f} CPU-ms per journey pass; peak held {c["peak_held"]}')
PY
    rm -f "$out"
  done
}

bench_sizes() {
  echo "== size distributions cost a draw, not a computation: mem:// 5 s unlimited, a fixed 580 B against a uniform range and a log-normal of the same mean ($RUNS runs, interleaved)"
  local size rate cpu
  for _ in $(seq "$RUNS"); do
    for size in 580 100..1060 lognormal:512,0.5; do
      read -r rate cpu _ _ < <(measure mem://sizes --size "$size" --warmup 1s --duration 5s)
      echo "  $size: $rate msgs/s, $cpu CPU-s per million"
    done
  done
}

bench_groups() {
  local rate=${GROUPS_RATE:-400000} dir one four k
  echo "== groups cost nothing per message: mem://, 4 producers -> 4 consumers at $rate msgs/s in total, as one group and as four groups of one each ($RUNS runs, interleaved; received msgs/s and CPU-s per million received)"
  dir=$(mktemp -d)
  one="$dir/one.toml"; four="$dir/four.toml"
  printf '[phases]\nwarmup = "1s"\nduration = "5s"\n[[groups]]\nname = "all"\ntarget = "mem://groups"\ntopics = { count = 4, pattern = "g.{i}" }\nproducers = { rate = %s }\n' "$rate" >"$one"
  printf '[phases]\nwarmup = "1s"\nduration = "5s"\n' >"$four"
  for k in 0 1 2 3; do
    printf '[[groups]]\nname = "g%s"\ntarget = "mem://groups"\ntopics = { count = 1, pattern = "g.%s" }\nproducers = { rate = %s }\n' "$k" "$k" "$((rate / 4))" >>"$four"
  done
  local r c _
  for _ in $(seq "$RUNS"); do
    read -r r c _ _ < <(measure "$one")
    echo "  1 group:  $r msgs/s, $c CPU-s per million"
    read -r r c _ _ < <(measure "$four")
    echo "  4 groups: $r msgs/s, $c CPU-s per million"
  done
  rm -rf "$dir"
}

# measure_sent ARGS... -> prints "sent_per_s cpu_s_per_million_sent" (producers only)
measure_sent() {
  local out tm
  out=$(mktemp); tm=$(mktemp)
  /usr/bin/time -f "%U %S" -o "$tm" "$B" run "$@" --no-output --quiet --format json >"$out"
  python3 - "$out" "$tm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
u, s = open(sys.argv[2]).read().split()[-2:]
sent = sum(p["counters"]["sent"] for p in r["phases"])
print(f'{r["result"]["sent_per_s"]:.0f} {(float(u) + float(s)) / max(sent, 1) * 1e6:.3f}')
PY
  rm -f "$out" "$tm"
}

bench_redis() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local port=${MSGBENCH_IT_REDIS_URL##*:} payload
  payload=$(head -c 100 /dev/zero | tr '\0' x)
  echo "== Redis PUBLISH (no subscriber) and XADD (MAXLEN ~ 100000), 100 B, 4 connections with 64 commands in flight each: msgbench against redis-benchmark -c 4 -P 64 ($RUNS runs, interleaved; CPU-s per million of each client process)"
  local kind
  for kind in publish xadd; do
    local mr=() mc=() rr=() rc=() url cmd
    if [ "$kind" = publish ]; then
      url="$MSGBENCH_IT_REDIS_URL"; cmd=(PUBLISH bench.redis.ch "$payload")
    else
      url="$MSGBENCH_IT_REDIS_URL?mode=streams&maxlen=100000"; cmd=(XADD bench.redis.xs MAXLEN '~' 100000 '*' d "$payload")
    fi
    for _ in $(seq "$RUNS"); do
      read -r rate cpu < <(measure_sent "$url" --topic "bench.redis.$kind" -p 4 -c 0 --size 100 --max-in-flight 64 --warmup 1s --duration 5s)
      mr+=("$rate"); mc+=("$cpu")
      local tm out; tm=$(mktemp)
      out=$(/usr/bin/time -f "%U %S" -o "$tm" redis-benchmark -p "$port" -c 4 -P 64 -n 2000000 -q "${cmd[@]}" 2>/dev/null | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
      rr+=("${out%.*}")
      rc+=("$(python3 -c "u,s=open('$tm').read().split()[-2:]; print(f'{(float(u)+float(s))/2.0:.3f}')")")
      rm -f "$tm"
      echo "  $kind run: msgbench ${mr[-1]} msgs/s at ${mc[-1]} CPU-s/M; redis-benchmark ${rr[-1]} requests/s at ${rc[-1]} CPU-s/M"
    done
    echo "  $kind median: msgbench $(printf '%s\n' "${mr[@]}" | median) msgs/s, $(printf '%s\n' "${mc[@]}" | median) CPU-s/M; redis-benchmark $(printf '%s\n' "${rr[@]}" | median) requests/s, $(printf '%s\n' "${rc[@]}" | median) CPU-s/M (target: msgbench at least its rate at no more CPU)"
  done
}

bench_search() {
  echo "== capacity search with default settings: mem:// capped at 50k msgs/s, objective e2e.p99 < 10ms (target: within 60 s, answer within 5% of 50k) ($RUNS runs)"
  local out caps=() secs=()
  out=$(mktemp)
  for _ in $(seq "$RUNS"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$B" search 'mem://bench-search?max_rate=50k' --slo 'e2e.p99 < 10ms' --no-output --quiet --format json >"$out"
    t1=$(date +%s.%N)
    caps+=("$(python3 -c "import json; print(round(json.load(open('$out'))['search']['end']['capacity_per_s']))")")
    secs+=("$(python3 -c "print(round($t1 - $t0, 1))")")
    echo "  run: capacity ${caps[-1]} msgs/s in ${secs[-1]} s"
  done
  rm -f "$out"
  echo "  median: capacity $(printf '%s\n' "${caps[@]}" | median) msgs/s, $(printf '%s\n' "${secs[@]}" | median) s"
}

bench_proxy() {
  local free='import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
  local sport pport; sport=$(python3 -c "$free"); pport=$(python3 -c "$free")
  "$B" serve amqp-sink --quiet --listen "127.0.0.1:$sport" & local spid=$!
  "$B" serve amqp-proxy --quiet --listen "127.0.0.1:$pport" --upstream "amqp://127.0.0.1:$sport" & local ppid=$!
  sleep 0.5
  echo "== AMQP 0-9-1 through the strict proxy (serve amqp-proxy) versus direct to serve amqp-sink ($RUNS runs, interleaved)"
  local out; out=$(mktemp)
  conns() { "$B" run "$1" --storm --concurrency 64 --duration 5s "${@:2}" --no-output --quiet --format json >"$out"
    python3 -c "import json; print(round(json.load(open('$out'))['connections']['connections_per_s']))"; }
  mbs() { "$B" run "$1" -p 10 -c 0 --size 10MB --confirm --max-in-flight 4 --warmup 1s --duration 5s \
      --no-output --quiet --format json >"$out"
    python3 -c "import json; print(round(json.load(open('$out'))['result']['sent_mb_per_s']))"; }
  local dc=() pc=() sc=() dm=() pm=()
  for _ in $(seq "$RUNS"); do
    dc+=("$(conns "amqp://127.0.0.1:$sport")"); pc+=("$(conns "amqp://127.0.0.1:$pport")")
    sc+=("$(conns "amqp://127.0.0.1:$sport" --pipeline-handshake)")
    dm+=("$(mbs "amqp://127.0.0.1:$sport")"); pm+=("$(mbs "amqp://127.0.0.1:$pport")")
    echo "  run: connections/s direct ${dc[-1]}, through the proxy ${pc[-1]}, direct pipelined ${sc[-1]}; MB/s direct ${dm[-1]}, through the proxy ${pm[-1]}"
  done
  rm -f "$out"
  kill -INT "$ppid"; wait "$ppid" 2>/dev/null || true
  kill "$spid"; wait "$spid" 2>/dev/null || true
  echo "  median: connections/s direct $(printf '%s\n' "${dc[@]}" | median), through the proxy $(printf '%s\n' "${pc[@]}" | median), direct pipelined $(printf '%s\n' "${sc[@]}" | median); MB/s direct $(printf '%s\n' "${dm[@]}" | median), through the proxy $(printf '%s\n' "${pm[@]}" | median)"
}

bench_fanout() {
  # Fan-out receivers at connection scale on a broker: FANOUT_CLIENTS subscribers (default
  # 10,000) of one topic at 10 msgs/s, on ordinary sockets and, with the open-file limit
  # lowered to 4,096, held in io_uring tables. Figures: completeness, generator RSS per
  # subscriber, CPU, e2e latency.
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local n=${FANOUT_CLIENTS:-10000} url lim
  for url in "$MSGBENCH_IT_NATS_URL" "$MSGBENCH_IT_MQTT_URL"; do
    echo "== fan-out: 1 publisher at 10 msgs/s -> $n subscribers, ${url%%:*}, 10 s ($RUNS runs each way)"
    for lim in "$(ulimit -Hn)" 4096; do
      local per=()
      for _ in $(seq "$RUNS"); do
        local out tm
        out=$(mktemp); tm=$(mktemp)
        ( ulimit -n "$lim"; /usr/bin/time -f "%U %S %M" -o "$tm" "$B" run "$url" --topic fan/t -p 1 -c "$n" \
            --connect-rate 5000 --rate 10 --warmup 1s --duration 10s --no-output --quiet --format json >"$out" )
        read -r p line < <(python3 - "$out" "$tm" "$n" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); u, s, rss = open(sys.argv[2]).read().split()[-3:]; n = int(sys.argv[3])
i, m = r["integrity"], r["result"]
held = any("io_uring" in e["detail"] for e in r.get("events", []))
print(f'{int(rss)/n:.1f} {"io_uring-held" if held else "descriptors"}: completeness {i["completeness"]*100:.2f}%, '
      f'{int(rss)/n:.1f} KiB RSS per subscriber, CPU {float(u)+float(s):.1f} s, e2e p50 {m["e2e"]["p50"]/1e6:.0f} ms p99 {m["e2e"]["p99"]/1e6:.0f} ms')
PY
)
        echo "  nofile $lim, $line"
        per+=("$p")
        rm -f "$out" "$tm"
      done
      echo "  median (nofile $lim): $(printf '%s\n' "${per[@]}" | median) KiB per subscriber"
    done
  done
}

bench_ws() {
  local n=${WS_CLIENTS:-10000}
  # One broadcast server per 15,000 clients: each must stay within its own open-file limit.
  local servers=${WS_SERVERS:-$(( (n + 14999) / 15000 ))} ports=() pids=() hosts
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  ulimit -n "$(ulimit -Hn)"
  # The relay and what the clients subscribe to: the broadcast server fed from NATS, or with
  # WS_GATEWAY rango's gateway fed from RabbitMQ (streams named by URL).
  local serve=(--from "$MSGBENCH_IT_NATS_URL" --topic bench.rango) stream="public.{i}"
  local scenario=(scenarios/rango-fanout.toml --target "$MSGBENCH_IT_NATS_URL" --topic bench.rango)
  local what="NATS publisher at ${WS_RATE:-100} msgs/s -> $servers ws-broadcast"
  if [ -n "${WS_GATEWAY:-}" ]; then
    serve=(--gateway rango --from "$MSGBENCH_IT_AMQP_URL") stream="btcusd.trades"
    scenario=(scenarios/rango-gateway.toml --target "$MSGBENCH_IT_AMQP_URL")
    what="AMQP publisher of JSON events at ${WS_RATE:-100} msgs/s -> $servers ws-broadcast --gateway rango"
  fi
  for _ in $(seq "$servers"); do
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$B" serve ws-broadcast --quiet --listen "127.0.0.1:$port" "${serve[@]}" &
    pids+=("$!"); ports+=("$port")
  done
  hosts=$(printf '127.0.0.1:%s,' "${ports[@]}"); hosts=${hosts%,}
  sleep 2 # each server connects to its broker (a gateway declares and binds its queue)
  local ramp=${WS_CONNECT_RATE:-5000} src=${WS_SOURCE_ADDRS:-127.0.0.1-127.0.0.4} rate=${WS_RATE:-100}
  echo "== rango: $what -> $n WebSocket clients joining at $ramp/s from $src, 10 s ($RUNS runs)"
  local comp=() per=()
  for _ in $(seq "$RUNS"); do
    local out tm
    out=$(mktemp); tm=$(mktemp)
    /usr/bin/time -f "%U %S %M" -o "$tm" "$B" run "${scenario[@]}" --consume-from "ws://$hosts/?stream=$stream" -c "$n" \
      --connect-rate "$ramp" --source-addrs "$src" --rate "$rate" --no-output --quiet --format json >"$out"
    read -r c p line < <(python3 - "$out" "$tm" "$n" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); u, s, rss = open(sys.argv[2]).read().split()[-3:]; n = int(sys.argv[3])
i, m = r["integrity"], r["result"]
joined = next((e["detail"].rsplit(" in ", 1)[-1] for e in r.get("events", []) if e["kind"] == "connected"), "?")
print(f'{i["completeness"]*100:.4f} {int(rss)/n:.1f} {i["delivered"]} of {i["expected"]} deliveries, lost {i["lost"]}, all joined in {joined}, '
      f'e2e p50 {m["e2e"]["p50"]/1e6:.1f} ms p99 {m["e2e"]["p99"]/1e6:.1f} ms, CPU {float(u)+float(s):.1f} s, RSS {int(rss)//1024} MiB')
PY
)
    echo "  run: completeness $c%, $p KiB RSS per client; $line"
    comp+=("$c"); per+=("$p")
    rm -f "$out" "$tm"
  done
  local srss=0
  for p in "${pids[@]}"; do
    srss=$(( srss + $(awk '/VmHWM/ {print $2}' "/proc/$p/status") ))
  done
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  echo "  median: completeness $(printf '%s\n' "${comp[@]}" | median)%, $(printf '%s\n' "${per[@]}" | median) KiB generator RSS per client (servers' peak RSS together: $(( srss / 1024 )) MiB)"
}

bench_http() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; return 1; }
  echo "== HTTP/1.1 GET against nginx, 50 connections, closed loop, 10 s; msgbench (--io readiness and --io batched) and wrk interleaved ($RUNS runs each)"
  local ours=() oc=() bat=() bc=() theirs=() tc=()
  for _ in $(seq "$RUNS"); do
    local out tm io
    out=$(mktemp); tm=$(mktemp)
    for io in readiness batched; do
      /usr/bin/time -f "%U %S" -o "$tm" "$B" run "$MSGBENCH_IT_HTTP_URL" --method GET -p 50 --workers 2 --io "$io" \
        --warmup 1s --duration 10s --no-output --quiet --format json >"$out"
      read -r rate cpu < <(python3 - "$out" "$tm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); u, s = open(sys.argv[2]).read().split()[-2:]
n = sum(p["counters"]["acked"] for p in r["phases"])
print(f'{r["result"]["sent_per_s"]:.0f} {(float(u)+float(s))/max(n,1)*1e6:.2f}')
PY
)
      printf '  msgbench %-9s %s req/s, %s CPU-s per million\n' "$io:" "$rate" "$cpu"
      if [ "$io" = readiness ]; then ours+=("$rate"); oc+=("$cpu"); else bat+=("$rate"); bc+=("$cpu"); fi
    done
    /usr/bin/time -f "%U %S" -o "$tm" wrk -c50 -t2 -d10s "$MSGBENCH_IT_HTTP_URL" >"$out"
    read -r rate cpu < <(python3 - "$out" "$tm" <<'PY'
import re, sys
t = open(sys.argv[1]).read(); u, s = open(sys.argv[2]).read().split()[-2:]
total = int(re.search(r"(\d+) requests in", t).group(1)); rate = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
print(f'{rate:.0f} {(float(u)+float(s))/max(total,1)*1e6:.2f}')
PY
)
    echo "  wrk:               $rate req/s, $cpu CPU-s per million"
    theirs+=("$rate"); tc+=("$cpu")
    rm -f "$out" "$tm"
  done
  local r a rb ab w b
  r=$(printf '%s\n' "${ours[@]}" | median); a=$(printf '%s\n' "${oc[@]}" | median)
  rb=$(printf '%s\n' "${bat[@]}" | median); ab=$(printf '%s\n' "${bc[@]}" | median)
  w=$(printf '%s\n' "${theirs[@]}" | median); b=$(printf '%s\n' "${tc[@]}" | median)
  echo "  median: msgbench readiness $r req/s at $a CPU-s/M; batched $rb req/s at $ab CPU-s/M; wrk $w req/s at $b CPU-s/M"
  echo "  against wrk: readiness rate $(python3 -c "print(f'{$r/$w:.2f}')")x, CPU $(python3 -c "print(f'{$a/$b:.2f}')")x; batched rate $(python3 -c "print(f'{$rb/$w:.2f}')")x, CPU $(python3 -c "print(f'{$ab/$b:.2f}')")x (issue 25's target: >= 1.3x the rate at <= 0.6x the CPU)"
  local half; half=$(python3 -c "print(int($r/2))")
  "$B" run "$MSGBENCH_IT_HTTP_URL" --method GET -p 50 --workers 2 --rate "$half" --warmup 1s --duration 10s \
    --no-output --quiet --format json | python3 -c "
import json, sys; r = json.load(sys.stdin); m = r['result']
print(f'  fixed rate $half req/s: sent {m[\"sent_per_s\"]:.0f}/s, response p50 {m[\"publish\"][\"p50\"]/1e3:.0f} us, p99 {m[\"publish\"][\"p99\"]/1e3:.0f} us; from the intended send time (CO-corrected) p50 {m[\"e2e\"][\"p50\"]/1e3:.0f} us, p99 {m[\"e2e\"][\"p99\"]/1e3:.0f} us')"
}

# Small windows on acknowledged protocols (issue 25): MQTT QoS 1 through Mosquitto, 10
# publishers with one message in flight each, and NATS request/reply through nats-server,
# 10 requesters with one request in flight each; --io readiness and --io batched interleaved.
bench_window() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local kind io
  for kind in mqtt-qos1 nats-rr; do
    local args
    if [ "$kind" = mqtt-qos1 ]; then
      echo "== MQTT QoS 1 via Mosquitto: 10 publishers, one per topic, one message in flight each, 100 B, no subscribers, 5 s, default workers (one, the broker being local) ($RUNS runs per mode; target <= 6 CPU-s per million)"
      args=("$MSGBENCH_IT_MQTT_URL" --qos 1 --topics 10 --topic 'bench/win/{i}' -p 1 -c 0 --max-in-flight 1)
    else
      echo "== NATS request/reply via nats-server: 10 requesters with one request in flight each, 10 responders (msgbench's consumers), 100 B, 5 s, default workers ($RUNS runs per mode; CPU-s per million round trips)"
      args=("$MSGBENCH_IT_NATS_URL" --request-reply --topics 10 --topic 'bench.rr.{i}' -p 1 -c 1 --max-in-flight 1)
    fi
    local rd=() rc=() bd=() bcp=()
    for _ in $(seq "$RUNS"); do
      for io in readiness batched; do
        read -r rate cpu < <(measure_sent "${args[@]}" --size 100 --io "$io" --warmup 1s --duration 5s)
        printf '  %-9s %s msgs/s, %s CPU-s per million\n' "$io:" "$rate" "$cpu"
        if [ "$io" = readiness ]; then rd+=("$rate"); rc+=("$cpu"); else bd+=("$rate"); bcp+=("$cpu"); fi
      done
    done
    echo "  median: readiness $(printf '%s\n' "${rd[@]}" | median) msgs/s at $(printf '%s\n' "${rc[@]}" | median) CPU-s/M; batched $(printf '%s\n' "${bd[@]}" | median) msgs/s at $(printf '%s\n' "${bcp[@]}" | median) CPU-s/M"
  done
}

# zmq_in_one_process UNIT AIM ARGS...: RUNS runs of `measure ARGS...`, each line and the median
# in UNIT (msgs or deliveries) per second.
zmq_in_one_process() {
  local unit=$1 aim=$2 rates=()
  shift 2
  for _ in $(seq "$RUNS"); do
    read -r rate cpu rss lost < <(measure "$@" --size 64 --warmup 1s --duration 5s)
    echo "  run: $rate $unit/s end to end, $cpu CPU-s per million $unit, lost $lost"
    rates+=("$rate")
  done
  echo "  median: $(printf '%s\n' "${rates[@]}" | median) $unit/s$aim"
}

bench_zmq() {
  echo "== ZeroMQ PUSH/PULL 1 -> 1, 64 B, unlimited, both ends in one process over loopback TCP ($RUNS runs)"
  zmq_in_one_process msgs " (aim >= 1,000,000)" "zmq://127.0.0.1:0"
  echo "== ZeroMQ PUB/SUB 1 -> 2 subscribers, 64 B, unlimited, both ends in one process ($RUNS runs)"
  zmq_in_one_process deliveries "" "zmq://127.0.0.1:0?pattern=pubsub" -c 2
  echo "== ZeroMQ PUSH/PULL 1 -> 1, 64 B, unlimited, between two msgbench processes (--segment consumers | producers, merged; $RUNS runs)"
  local rates=()
  for _ in $(seq "$RUNS"); do
    local dir port start
    dir=$(mktemp -d); port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    start=$(( $(date +%s%3N) + 2000 ))
    "$B" run "zmq://127.0.0.1:$port" --size 64 --warmup 1s --duration 5s --segment consumers \
      --start-at "$start" --quiet -o "$dir/rx.jsonl" >/dev/null 2>&1 &
    local rx=$!
    "$B" run "zmq://127.0.0.1:$port" --size 64 --warmup 1s --duration 5s --segment producers \
      --start-at "$start" --quiet -o "$dir/tx.jsonl" >/dev/null 2>&1
    wait "$rx" || true
    read -r rate lost < <("$B" merge "$dir/rx.jsonl" "$dir/tx.jsonl" -o "$dir/all.jsonl" --format json 2>/dev/null | python3 -c "
import json, sys; r = json.load(sys.stdin); print(f'{r[\"result\"][\"received_per_s\"]:.0f} {r[\"integrity\"][\"lost\"]}')")
    echo "  run: $rate msgs/s received in the measure phase, lost $lost"
    rates+=("$rate")
    rm -rf "$dir"
  done
  echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s between two processes (aim >= 1,000,000)"
}

# ecp_run ARGS... -> prints "rate_of_last_required_stage cpu_s_per_million stage_table"
ecp_run() {
  local out tm
  out=$(mktemp); tm=$(mktemp)
  /usr/bin/time -f "%U %S" -o "$tm" "$B" run --preset ecp "$@" --no-output --quiet --format json >"$out"
  python3 - "$out" "$tm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); u, s = open(sys.argv[2]).read().split()[-2:]
sent = sum(p["counters"]["sent"] for p in r["phases"])
st = r["stages"]
win = next((x for x in st if x["window"]), st[-1])
table = "; ".join(f'{x["name"]} {x["msgs_per_s"]:.0f}/s p50 {x["latency"]["p50"]/1e6:.1f}ms p99 {x["latency"]["p99"]/1e6:.1f}ms missing {x["missing"]}' for x in st if x["reached"] or not x["optional"])
print(f'{win["msgs_per_s"]:.0f} {(float(u) + float(s)) / max(sent, 1) * 1e6:.2f} {table}')
PY
  rm -f "$out" "$tm"
}

bench_ecp() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local n=${ECP_MESSAGES:-100000}
  for broker in rabbitmq artemis; do
    local url extra=()
    if [ "$broker" = rabbitmq ]; then url=$MSGBENCH_IT_RMQ_AMQP10_URL; extra=(--address '/queue/{topic}'); else url=$MSGBENCH_IT_ARTEMIS_URL; fi
    echo "== AMQP 1.0 loop-back (ecp amqp mode) on $broker: $n x 3,000-byte durable messages, 2 senders, in-flight 1,000 ($RUNS runs)"
    local rates=() cpus=()
    for i in $(seq "$RUNS"); do
      read -r rate cpu table < <(ecp_run --ecp-mode amqp --inbox-url "$url" --inbox-queue "bench.ecp.amqp.$i" "${extra[@]}" \
        -p 2 --size 3000 --max-in-flight 1000 -n "$n")
      echo "  $rate msgs/s received, $cpu CPU-s per million ($table)"
      rates+=("$rate"); cpus+=("$cpu")
    done
    echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s at $(printf '%s\n' "${cpus[@]}" | median) CPU-s per million"
  done
  echo "== ECP endpoint mode through serve ecp-endpoint on Artemis: $n x 3,000-byte messages, in-flight 1,000 ($RUNS runs)"
  local rates=() cpus=()
  for i in $(seq "$RUNS"); do
    local q=(--outbox-queue "bench.ecp.$i.outbox" --reply-queue "bench.ecp.$i.reply" --send-event-queue "bench.ecp.$i.event" --inbox-queue "bench.ecp.$i.inbox")
    "$B" serve ecp-endpoint --quiet --broker "$MSGBENCH_IT_ARTEMIS_URL" "${q[@]}" 2>/dev/null &
    local sim=$!
    read -r rate cpu table < <(ecp_run --outbox-url "$MSGBENCH_IT_ARTEMIS_URL" "${q[@]}" --size 3000 --max-in-flight 1000 -n "$n")
    kill -INT "$sim"; wait "$sim" 2>/dev/null || true
    echo "  $rate msgs/s through RECEIVED, msgbench $cpu CPU-s per million ($table)"
    rates+=("$rate"); cpus+=("$cpu")
  done
  echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s at $(printf '%s\n' "${cpus[@]}" | median) CPU-s per million (msgbench only; the simulator runs on the same 2 cores)"
}

# views_run ARGS... -> prints the run's received msgs/s (measure phase and its drain). The run
# gets a 120x36 pseudo-terminal from `script`, so the table, the progress line or the TUI draw as
# they would for a person; what they draw is thrown away.
views_run() {
  local res; res=$(mktemp --suffix=.jsonl)
  local cmd; cmd="stty cols 120 rows 36; TERM=xterm-256color $(printf '%q ' "$B" run "$@" -o "$res")"
  timeout 120 script -qfec "$cmd" /dev/null </dev/null >/dev/null 2>&1
  "$B" report "$res" --format json | python3 -c 'import json, sys; print(round(json.load(sys.stdin)["result"]["received_per_s"]))'
  rm -f "$res"
}

bench_views() {
  command -v script >/dev/null || { echo "script is missing: apt-get install bsdutils" >&2; return 1; }
  local help common=(mem://views --size 64 --warmup 1s --duration 10s) views=(--tui) dash=0
  help=$("$B" run --help)
  # The dashboard flag comes with the web dashboard; until a build has it, the TUI alone is measured.
  if grep -q -- '--dashboard' <<<"$help"; then dash=1; fi
  if grep -q -- '--no-history' <<<"$help"; then common+=(--no-history); fi
  echo "== live views: mem:// 1 -> 1, 64 B, unlimited, 10 s on a pty: plain table versus --tui$([ $dash = 1 ] && echo ' --dashboard (with a client on its event stream)') ($RUNS runs each, interleaved)"
  [ $dash = 1 ] || echo "  note: this build has no --dashboard; measuring --tui alone"
  local plain=() with=()
  for _ in $(seq "$RUNS"); do
    plain+=("$(views_run "${common[@]}")")
    local port="" watcher=""
    if [ $dash = 1 ]; then
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      # A browser's worth of load: one client streaming the live events for the whole run.
      ( for _ in $(seq 100); do
          curl -sN --max-time 60 "http://127.0.0.1:$port/api/live/events" >/dev/null 2>&1 && break
          sleep 0.1
        done ) &
      watcher=$!
      with+=("$(views_run "${common[@]}" "${views[@]}" --dashboard "127.0.0.1:$port")")
      kill "$watcher" 2>/dev/null || true; wait "$watcher" 2>/dev/null || true
    else
      with+=("$(views_run "${common[@]}" "${views[@]}")")
    fi
    echo "  run: plain ${plain[-1]} msgs/s, with views ${with[-1]} msgs/s"
  done
  local a b
  a=$(printf '%s\n' "${plain[@]}" | median); b=$(printf '%s\n' "${with[@]}" | median)
  echo "  median: plain $a msgs/s, with views $b msgs/s, ratio $(python3 -c "print(f'{$b/$a:.3f}')") (target >= 0.95)"
}

# seg_run DIR I N ARGS...: segment I of N into DIR/seg-I.jsonl, in the background
seg_run() {
  local dir=$1 i=$2 n=$3; shift 3
  "$B" run "$@" --segment "$i/$n" -o "$dir/seg-$i.jsonl" --quiet --format json >"$dir/out-$i.json" 2>"$dir/err-$i.txt" &
}

bench_segments() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local common=("$MSGBENCH_IT_NATS_URL" --topics 4 --topic 'segbench.{i}' -p 1 -c 1 --size 64 --warmup 1s --duration 10s --no-history)
  "$B" run --help | grep -q -- '--no-history' || common=("${common[@]:0:${#common[@]}-1}")
  echo "== segments: NATS, 4 topics x (1 producer + 1 consumer), 64 B, unlimited, 10 s: one process versus 4 segments ($RUNS runs each, interleaved)"
  local single=() segs=()
  for _ in $(seq "$RUNS"); do
    local d; d=$(mktemp -d)
    "$B" run "${common[@]}" -o "$d/single.jsonl" --quiet --format json >"$d/single.json"
    single+=("$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["result"]["received_per_s"]))' "$d/single.json")")
    local start=$(( $(date +%s%3N) + 3000 ))
    for i in 0 1 2 3; do seg_run "$d" "$i" 4 "${common[@]}" --start-at "$start"; done
    wait
    "$B" merge "$d"/seg-*.jsonl -o "$d/run.jsonl" --format json 2>/dev/null >"$d/merged.json"
    segs+=("$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["result"]["received_per_s"]))' "$d/merged.json")")
    echo "  run: one process ${single[-1]} msgs/s, 4 segments merged ${segs[-1]} msgs/s"
    rm -rf "$d"
  done
  local a b
  a=$(printf '%s\n' "${single[@]}" | median); b=$(printf '%s\n' "${segs[@]}" | median)
  echo "  median: one process $a msgs/s, 4 segments $b msgs/s, ratio $(python3 -c "print(f'{$b/$a:.3f}')") (target >= 0.90)"
}

bench_merge() {
  scripts/brokers.sh up >/dev/null
  eval "$(scripts/brokers.sh env)"
  local d; d=$(mktemp -d)
  echo "== merge: 4 segments x 600 one-second intervals (a 10-minute run) ($RUNS runs)"
  # A real 4-segment run supplies the lines (histograms full of real latencies); each file is
  # then stretched to 600 intervals by repeating its measure intervals with their index moved.
  local start=$(( $(date +%s%3N) + 3000 ))
  for i in 0 1 2 3; do
    seg_run "$d" "$i" 4 "$MSGBENCH_IT_NATS_URL" --topics 4 --topic 'mergebench.{i}' -p 1 -c 1 --size 64 --rate 200000 --warmup 0 --duration 10s --start-at "$start"
  done
  wait
  for i in 0 1 2 3; do
    python3 - "$d/seg-$i.jsonl" "$d/long-$i.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
begin = lines[0]
ivs = [l for l in lines if l["type"] == "interval" and l["phase"] == "measure" and l["counters"]["received"] > 0]
end = [l for l in lines if l["type"] == "end"][0]
with open(sys.argv[2], "w") as out:
    out.write(json.dumps(begin) + "\n")
    for k in range(600):
        iv = dict(ivs[k % len(ivs)], index=k, start_s=float(k), end_s=float(k + 1))
        out.write(json.dumps(iv) + "\n")
    out.write(json.dumps(end) + "\n")
PY
  done
  local secs=() rss=()
  for _ in $(seq "$RUNS"); do
    local tm; tm=$(mktemp)
    /usr/bin/time -f "%e %M" -o "$tm" "$B" merge "$d"/long-*.jsonl -o "$d/merged.jsonl" 2>/dev/null
    read -r e m <"$tm"; rm -f "$tm"
    secs+=("$e"); rss+=("$m")
    echo "  run: ${e} s, peak RSS $((m / 1024)) MiB"
  done
  echo "  inputs: $(du -ch "$d"/long-*.jsonl | tail -1 | cut -f1) in 4 files, $(grep -c '"interval"' "$d/merged.jsonl") merged intervals"
  echo "  median: $(printf '%s\n' "${secs[@]}" | median) s (target < 2 s), peak RSS $(( $(printf '%s\n' "${rss[@]}" | median | cut -d. -f1) / 1024 )) MiB"
  rm -rf "$d"
}

bench_p2p() {
  local runs=${RUNS_P2P:-${RUNS_SET:-3}}
  echo "== brokerless point to point: AMQP 1.0 (bind=consumer) versus ZeroMQ, 1 -> 1, 100 B, unlimited, 5 s ($runs runs each, interleaved)"
  local unsettled; unsettled=$(mktemp --suffix=.toml)
  grep -v '^settled' scenarios/p2p-amqp10.toml >"$unsettled"
  local ar=() ac=() ur=() uc=() zr=() zc=()
  for _ in $(seq "$runs"); do
    read -r rate cpu _ lost < <(measure scenarios/p2p-amqp10.toml)
    echo "  amqp10 settled:   $rate msgs/s, $cpu CPU-s per million, lost $lost"; ar+=("$rate"); ac+=("$cpu")
    read -r rate cpu _ lost < <(measure "$unsettled")
    echo "  amqp10 unsettled: $rate msgs/s, $cpu CPU-s per million, lost $lost"; ur+=("$rate"); uc+=("$cpu")
    read -r rate cpu _ lost < <(measure scenarios/p2p-zmq.toml)
    echo "  zmq:              $rate msgs/s, $cpu CPU-s per million, lost $lost"; zr+=("$rate"); zc+=("$cpu")
  done
  rm -f "$unsettled"
  local a u z
  a=$(printf '%s\n' "${ar[@]}" | median); u=$(printf '%s\n' "${ur[@]}" | median); z=$(printf '%s\n' "${zr[@]}" | median)
  echo "  median: amqp10 settled $a msgs/s at $(printf '%s\n' "${ac[@]}" | median) CPU-s/M; amqp10 unsettled $u msgs/s at $(printf '%s\n' "${uc[@]}" | median) CPU-s/M; zmq $z msgs/s at $(printf '%s\n' "${zc[@]}" | median) CPU-s/M"
  echo "  ratio amqp10/zmq: settled $(python3 -c "print(f'{$a/$z:.2f}')"), unsettled $(python3 -c "print(f'{$u/$z:.2f}')") (target >= 0.25; the seed: qpid 31,000 vs ZeroMQ 650,000)"
}

# proc_cpu PID: user + system CPU seconds the process has used so far.
proc_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / hz}' "/proc/$1/stat"
}

bench_jetstream() {
  local d port pid
  d=$(mktemp -d); port=$(free_port)
  cat >"$d/js.conf" <<CONF
listen: 127.0.0.1:$port
jetstream {
  store_dir: "$d/store"
  max_memory_store: 1GB
  max_file_store: 4GB
}
CONF
  nats-server -c "$d/js.conf" -l "$d/nats.log" >/dev/null 2>&1 &
  pid=$!
  wait_port "$port" || { echo "nats-server did not start (see $d/nats.log)"; kill "$pid"; return 1; }
  # Streams large enough for the backlog an unlimited producer builds ahead of the consumer in
  # 6 s (beyond max_bytes a stream discards its oldest messages: counted lost), and a drain long
  # enough for the consumer to catch up (what it has not received by then is counted lost).
  local storage limit
  for storage in file memory; do
    limit=$([ "$storage" = file ] && echo 1GiB || echo 768MiB)
    echo "== NATS JetStream 1 producer -> 1 pull consumer, 256 B, $storage stream, PubAcks (window 1000), unlimited, 5 s ($RUNS runs)"
    local rates=() ours=() theirs=() k=0
    for _ in $(seq "$RUNS"); do
      k=$((k + 1))
      local before after out tm
      out=$(mktemp); tm=$(mktemp)
      before=$(proc_cpu "$pid")
      /usr/bin/time -f "%U %S" -o "$tm" "$B" run "nats+js://127.0.0.1:$port?storage=$storage&max_bytes=$limit&stream=BENCH_$storage" \
        --topic "bench.js.$storage.$k" --size 256 --max-in-flight 1000 --warmup 1s --duration 5s --drain 15s \
        --no-output --quiet --format json >"$out"
      after=$(proc_cpu "$pid")
      read -r rate cpu srv lost < <(python3 - "$out" "$tm" "$before" "$after" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
u, s = open(sys.argv[2]).read().split()[-2:]
msgs = max(sum(p["counters"]["received"] for p in r["phases"]), 1)
ours = (float(u) + float(s)) / msgs * 1e6
theirs = (float(sys.argv[4]) - float(sys.argv[3])) / msgs * 1e6
print(f'{r["result"]["received_per_s"]:.0f} {ours:.3f} {theirs:.3f} {r["integrity"]["lost"]}')
PY
)
      rm -f "$out" "$tm"
      echo "  run: $rate msgs/s end to end, CPU-s per million: msgbench $cpu, nats-server $srv, lost $lost"
      rates+=("$rate"); ours+=("$cpu"); theirs+=("$srv")
    done
    local a b
    a=$(printf '%s\n' "${ours[@]}" | median); b=$(printf '%s\n' "${theirs[@]}" | median)
    echo "  median: $(printf '%s\n' "${rates[@]}" | median) msgs/s; CPU-s per million: msgbench $a, nats-server $b; ratio $(python3 -c "print(f'{$a/$b:.2f}')") (target <= 0.5)"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$d"
}

case "${1:-all}" in
  mem) bench_mem ;;
  nats) bench_nats ;;
  jetstream) bench_jetstream ;;
  memory) bench_memory ;;
  mqtt) bench_mqtt ;;
  mqtt-ws) bench_mqtt_ws ;;
  demo) bench_demo ;;
  storm) bench_storm ;;
  conns) bench_conns ;;
  nats-conns) bench_nats_conns ;;
  amqp) bench_amqp ;;
  sink) bench_sink ;;
  ws) bench_ws ;;
  fanout) bench_fanout ;;
  textstamp) bench_textstamp ;;
  verdicts) bench_verdicts ;;
  sizes) bench_sizes ;;
  reconnect) bench_reconnect ;;
  vus) bench_vus ;;
  groups) bench_groups ;;
  churn) bench_churn ;;
  journeys) bench_journeys ;;
  search) bench_search ;;
  redis) bench_redis ;;
  proxy) bench_proxy ;;
  http) bench_http ;;
  window) bench_window ;;
  zmq) bench_zmq ;;
  p2p) bench_p2p ;;
  ecp) bench_ecp ;;
  kafka) bench_kafka ;;
  kafka-peers) bench_kafka_peers ;;
  backlog) bench_backlog ;;
  memflat) bench_memflat ;;
  views) bench_views ;;
  merge) bench_merge ;;
  segments) bench_segments ;;
  all) bench_mem; bench_nats; bench_jetstream; bench_memory; bench_mqtt; bench_mqtt_ws; bench_demo; bench_storm; bench_conns; bench_amqp; bench_sink; bench_proxy; bench_textstamp; bench_verdicts; bench_sizes; bench_reconnect; bench_churn; bench_groups; bench_journeys; bench_search; bench_redis; bench_ws; bench_fanout; bench_http; bench_window; bench_zmq; bench_p2p; bench_kafka; bench_kafka_peers; bench_backlog; bench_ecp; bench_views; bench_merge; bench_segments ;;
  *) echo "usage: $0 [mem|nats|jetstream|memory|mqtt|mqtt-ws|demo|storm|conns|nats-conns|amqp|sink|textstamp|verdicts|sizes|reconnect|churn|groups|journeys|vus|search|redis|ws|fanout|http|window|zmq|p2p|kafka|kafka-peers|backlog|memflat|ecp|views|merge|segments|all]" >&2; exit 2 ;;
esac
