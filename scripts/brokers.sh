#!/usr/bin/env bash
# Starts, stops and reports the real brokers msgbench's tests run against, on loopback only.
#
#   scripts/brokers.sh up       install (Debian packages, when missing and allowed) and start
#                               the brokers; install the peer libraries below
#   scripts/brokers.sh up kafka start only Kafka (leaves the other brokers as they are)
#   scripts/brokers.sh down kafka
#                               stop only Kafka
#   scripts/brokers.sh down     stop what `up` started (by PID)
#   scripts/brokers.sh status   show what runs and where
#   scripts/brokers.sh env      print the environment variables tests read (eval "$(... env)")
#   scripts/brokers.sh restart-rabbitmq [SECONDS]
#                               restart the RabbitMQ application inside its running node: every
#                               connection is closed and the port refuses connections for
#                               SECONDS (default 1) before it listens again (the broker-restart test)
#   scripts/brokers.sh kill-restart NAME [SECONDS]
#                               kill rabbitmq, artemis or kafka with SIGKILL (the Erlang VM or
#                               the JVM, by PID), wait SECONDS (default 1) and start it again on
#                               the data it left (tests/faults/faults.rs)
#   scripts/brokers.sh pause NAME SECONDS
#                               freeze a broker (SIGSTOP), then resume it (SIGCONT) SECONDS later
#   scripts/brokers.sh rabbitmqctl ARGS...
#                               rabbitmqctl against our node (e.g. list_connections name channels)
#   scripts/brokers.sh restart-artemis [SECONDS]
#                               stop Artemis (SIGTERM by PID: every connection is cut), wait
#                               SECONDS (default 1), start it again on the same data (durable
#                               messages survive) and wait until it answers
#
# Brokers:
#   nats-server on 127.0.0.1:${MSGBENCH_NATS_PORT:-14222}, JetStream on (store in $STATE/nats-js/,
#     wiped on every `up`; at most 1 GiB in memory and 4 GiB on disk: msgbench's streams reserve
#     256 MiB on file, 64 MiB in memory by default); core NATS tests and JetStream tests
#     (nats+js://, MSGBENCH_IT_NATS_JS_URL) share it; NATS over WebSocket on
#     127.0.0.1:${MSGBENCH_NATS_WS_PORT:-14223} (plain)
#   redis-server (package 'redis-server') on 127.0.0.1:${MSGBENCH_REDIS_PORT:-16379}, TLS on
#     ${MSGBENCH_REDIS_TLS_PORT:-16380} (server cert for localhost, client cert optional): no
#     persistence, at most 1 GiB of memory (writes beyond it are refused, not evicted); a
#     system Redis (6379), if the package started one, is left alone
#   mosquitto (MQTT, package 'mosquitto') with three listeners on 127.0.0.1:
#     ${MSGBENCH_MQTT_PORT:-11883}       plain, anonymous
#     ${MSGBENCH_MQTT_AUTH_PORT:-11884}  plain, user msgbench / password msgbench-secret only
#     ${MSGBENCH_MQTTS_PORT:-18883}      TLS (server cert for localhost and 127.0.0.1), anonymous,
#                                        client certificate optional
#   Test CA, server and client certificates are generated once with openssl into $STATE/tls/.
#   A system mosquitto service (port 1883), if the package started one, is left alone.
#   rabbitmq-server (AMQP 0-9-1, package 'rabbitmq-server'): our own node msgbench@localhost,
#     AMQP on 127.0.0.1:${MSGBENCH_AMQP_PORT:-20672}, user guest / password guest (loopback only),
#     MQTT plugin on 127.0.0.1:${MSGBENCH_RMQ_MQTT_PORT:-21883} (cross-protocol pipelines: MQTT
#     topics a/b are AMQP routing keys a.b on amq.topic) and, over WebSocket (web_mqtt plugin),
#     on 127.0.0.1:${MSGBENCH_RMQ_WS_MQTT_PORT:-21884} at path /ws, AMQP 1.0 plugin on the same AMQP port
#     (addresses /queue/NAME, /topic/KEY, /exchange/X/KEY), no management UI. Its Erlang distribution listens on
#     127.0.0.1:${MSGBENCH_AMQP_DIST_PORT:-20673}, our rabbitmqctl calls on the 11 ports after it,
#     and it registers with an epmd of ours on 127.0.0.1:${MSGBENCH_EPMD_PORT:-24369}. A system
#     RabbitMQ (5672, 25672, 15672) or epmd (4369), if the package started one, is left alone.
#     The node runs as whoever runs this script (the /usr/sbin wrappers, which switch to the user
#     'rabbitmq', are bypassed), from $STATE/rabbitmq/ (config, Erlang cookie, data, logs); its
#     data is wiped on every `up`. Starting it takes several seconds.
#   nginx (HTTP, package 'nginx'): our own instance, config and logs in $STATE/nginx/, in the
#     foreground (no daemon mode, so `stop` signals the master by PID), 2 workers, access log
#     off, keep-alive limits raised so connections are not recycled mid-run, and one location
#     answering every method (POST too) with `200 ok\n`:
#     ${MSGBENCH_NGINX_PORT:-18080}      HTTP/1.1
#     ${MSGBENCH_NGINX_H2C_PORT:-18081}  HTTP/2 with prior knowledge (h2c; nginx 1.22 speaks only
#                                        HTTP/2 on a plain listener marked http2)
#     ${MSGBENCH_NGINX_TLS_PORT:-18443}  HTTPS, HTTP/1.1 and h2 by ALPN (the test server
#                                        certificate above: 127.0.0.1 and localhost)
#     A system nginx (port 80), if the package started one, is left alone.
#   ActiveMQ Artemis 2.37.0 (AMQP 1.0, Java; package 'default-jre-headless'): the
#     distribution is fetched once from Maven Central by its coordinates with `mvn` (package
#     'maven') and cached in $STATE/artemis/; a fresh instance is created on every `up` (data
#     wiped) with user msgbench / password msgbench-secret, login required, no web console, a
#     1 GiB heap, and only these acceptors on 127.0.0.1:
#     ${MSGBENCH_ARTEMIS_PORT:-26672}      AMQP, plain
#     ${MSGBENCH_ARTEMIS_TLS_PORT:-26671}  AMQP, TLS (the test server certificate above)
#     ${MSGBENCH_ARTEMIS_MQTT_PORT:-26883} MQTT, plain, and MQTT over WebSocket on the same port
#                                          (any path): a second WebSocket server, Netty's
#     Addresses and anycast queues are created on demand (a `queue` capability asks for anycast)
#     and deleted when empty and unused, except under `noauto.`, where nothing is created (the
#     missing-address tests); an address under `full.` rejects messages once it holds 256 KiB
#     (the refused-outcome tests). Artemis takes several seconds to start.
#   Apache Kafka $KAFKA_VERSION (Java): kafka_2.13 and kafka-tools with their runtime dependencies,
#     fetched once from Maven Central by their coordinates with `mvn` into $STATE/kafka/libs/;
#     a single KRaft node (broker and controller in one process) with plaintext on
#     127.0.0.1:${MSGBENCH_KAFKA_PORT:-19092}, its controller on the port after it, SSL on
#     ${MSGBENCH_KAFKA_TLS_PORT:-19094} (advertised as localhost; client cert optional), a
#     plaintext listener on ${MSGBENCH_KAFKA_PROXIED_PORT:-19096} that advertises the port after
#     it (where the fault-matrix test puts its proxy), SASL PLAIN, SCRAM-SHA-256 and
#     SCRAM-SHA-512 (user bench, password bench-secret) on ${MSGBENCH_KAFKA_SASL_PORT:-19098}, storage
#     formatted on first start in $STATE/kafka/data/ (kept across `up`s: topics survive), a
#     1 GiB heap, no group join delay, topics created on demand. Starting takes several seconds.
#   Apache Qpid Broker-J $QPID_VERSION (AMQP 0-9-1 and AMQP 1.0 on one port, Java): its jars (the
#     broker, both protocols, the memory store, its logging) fetched once from Maven Central by
#     their coordinates with `mvn` into $STATE/qpid/libs/; configuration in memory (nothing
#     kept), a 512 MiB heap, one port on 127.0.0.1:${MSGBENCH_QPID_PORT:-27672} with user
#     msgbench / password msgbench-secret. Its password provider keeps its default of offering
#     no PLAIN login without TLS (only SCRAM-SHA-256, SCRAM-SHA-1 and CRAM-MD5): the SCRAM tests
#     log in there. Queues are created on demand for any address (a node auto-creation policy),
#     so AMQP 1.0 links need no declare; a second virtual host, `other`, creates nothing on
#     demand (the tests choose it by the URL's path). Starting takes several seconds.
# Peer libraries (installed, nothing to start or stop):
#   A C compiler, make, pkg-config, libssl-dev and zlib1g-dev, with which the Kafka driver builds
#   librdkafka (the source the rdkafka-sys crate bundles).
#   libzmq 4.3.4, the reference ZeroMQ implementation, through pyzmq (package 'python3-zmq') for
#     the system Python /usr/bin/python3 (`env` exports it as MSGBENCH_IT_LIBZMQ_PYTHON once it
#     imports zmq): tests/it/libzmq.rs relays msgbench's ZeroMQ traffic through it.
#   Third-party clients of msgbench's own servers (tests/it/thirdparty.rs): pika (package
#     'python3-pika', AMQP 0-9-1), paho-mqtt (package 'python3-paho-mqtt', MQTT 3.1.1 and 5) and
#     websockets (package 'python3-websockets') for the system Python, and Apache Qpid Proton
#     (package 'python3-qpid-proton', AMQP 1.0: tests/it/amqp10_p2p.rs, the peer of brokerless
#     runs) (`env` exports it as MSGBENCH_IT_PEER_PYTHON once it imports all four), curl (package 'curl') and nghttp
#     (package 'nghttp2-client', HTTP/2). Like the brokers, one that cannot be installed fails
#     `up`; run by hand without them, the tests that need one say they were skipped.
#   A current nats-server (v2.15.2, built once with Go from its module into $STATE/gobin/,
#     when Go is installed): Debian's 2.9 predates TLS handshake_first, which
#     tests/it/nats.rs tries msgbench's ?tls_first against (`env` exports it as
#     MSGBENCH_IT_NATS_SERVER_CURRENT once built). Optional: without Go or the module, `up`
#     says so and that test says it was skipped.
#   h2spec (v2.2.1, built the same way, optional the same way; `env` exports it as
#     MSGBENCH_IT_H2SPEC): the HTTP/2 conformance tester tests/it/thirdparty.rs runs against
#     `msgbench serve http` (h2c and TLS).
#   Mochi MQTT (v2.7.9, a Go MQTT 3.1.1/5 broker, built the same way, optional the same way;
#     `env` exports it as MSGBENCH_IT_MOCHI_MQTT): a third MQTT broker besides Mosquitto and
#     Artemis, which tests/it/mqtt.rs starts on free ports of its own.
# State (PID files, configs, logs, certificates) lives in
# ${MSGBENCH_BROKERS_DIR:-$HOME/.cache/msgbench-brokers}.
# Set MSGBENCH_NO_INSTALL=1 to forbid installing packages.
set -euo pipefail

STATE=${MSGBENCH_BROKERS_DIR:-$HOME/.cache/msgbench-brokers}
# Every fixed port sits below Linux's ephemeral range (32768-60999 by default): a port inside it
# can be taken, between our check and the broker's bind, by any outgoing connection's local end
# (RabbitMQ's own start-up makes several), and the broker then fails with "address in use".
NATS_PORT=${MSGBENCH_NATS_PORT:-14222}
NATS_WS_PORT=${MSGBENCH_NATS_WS_PORT:-14223}
REDIS_PORT=${MSGBENCH_REDIS_PORT:-16379}
REDIS_TLS_PORT=${MSGBENCH_REDIS_TLS_PORT:-16380}
MQTT_PORT=${MSGBENCH_MQTT_PORT:-11883}
MQTT_AUTH_PORT=${MSGBENCH_MQTT_AUTH_PORT:-11884}
MQTTS_PORT=${MSGBENCH_MQTTS_PORT:-18883}
AMQP_PORT=${MSGBENCH_AMQP_PORT:-20672}
AMQP_DIST_PORT=${MSGBENCH_AMQP_DIST_PORT:-20673}
EPMD_PORT=${MSGBENCH_EPMD_PORT:-24369}
RMQ_MQTT_PORT=${MSGBENCH_RMQ_MQTT_PORT:-21883}
RMQ_WS_MQTT_PORT=${MSGBENCH_RMQ_WS_MQTT_PORT:-21884}
NGINX_PORT=${MSGBENCH_NGINX_PORT:-18080}
NGINX_H2C_PORT=${MSGBENCH_NGINX_H2C_PORT:-18081}
NGINX_TLS_PORT=${MSGBENCH_NGINX_TLS_PORT:-18443}
NGINX=$STATE/nginx
ARTEMIS_VERSION=2.37.0
ARTEMIS_PORT=${MSGBENCH_ARTEMIS_PORT:-26672}
ARTEMIS_TLS_PORT=${MSGBENCH_ARTEMIS_TLS_PORT:-26671}
ARTEMIS_MQTT_PORT=${MSGBENCH_ARTEMIS_MQTT_PORT:-26883}
ARTEMIS=$STATE/artemis
ARTEMIS_USER=msgbench
ARTEMIS_PASS=msgbench-secret
KAFKA_VERSION=4.4.0
KAFKA_PORT=${MSGBENCH_KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=$((KAFKA_PORT + 1))
KAFKA_TLS_PORT=${MSGBENCH_KAFKA_TLS_PORT:-19094}
# A listener that advertises the next port, where no broker listens: a test puts its fault
# proxy there, so that every connection a client makes (bootstrap and the broker's advertised
# address alike) passes through the proxy.
KAFKA_PROXIED_PORT=${MSGBENCH_KAFKA_PROXIED_PORT:-19096}
# SASL (PLAIN, user `bench`, password `bench-secret`) over plain TCP.
KAFKA_SASL_PORT=${MSGBENCH_KAFKA_SASL_PORT:-19098}
KAFKA=$STATE/kafka
QPID_VERSION=9.2.0
QPID_PORT=${MSGBENCH_QPID_PORT:-27672}
QPID=$STATE/qpid
RMQ_NODE=msgbench@localhost
RMQ=$STATE/rabbitmq
RMQ_BIN=/usr/lib/rabbitmq/bin # the package's scripts proper, without the su wrappers of /usr/sbin
MQTT_USER=msgbench
MQTT_PASS=msgbench-secret
TLS=$STATE/tls
mkdir -p "$STATE"

log() { echo "brokers: $*" >&2; }

find_bin() { # find_bin NAME: print its path; also looks in the sbin/bin dirs non-root PATHs lack
  local d
  command -v "$1" 2>/dev/null && return 0
  for d in /usr/sbin /usr/bin /sbin /usr/local/sbin; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

install_pkg() { # install_pkg WHAT PACKAGE: installs PACKAGE because WHAT is missing
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

need_pkg() { # need_pkg BINARY PACKAGE
  find_bin "$1" >/dev/null && return 0
  install_pkg "$1" "$2"
}

# The Debian python3-zmq package (pyzmq on the system's libzmq) serves the system Python only:
# a `python3` earlier on PATH (pyenv, a virtualenv) would not see it, or would see a pip pyzmq
# with a libzmq of its own.
SYS_PYTHON=/usr/bin/python3

libzmq_python_ok() { # the system Python imports zmq (pyzmq on Debian's libzmq)
  [ -x "$SYS_PYTHON" ] && "$SYS_PYTHON" -c 'import zmq' >/dev/null 2>&1
}

libzmq_up() { # a peer library for the interop tests (tests/it/libzmq.rs): nothing to start
  libzmq_python_ok && return 0
  install_pkg "python3 module zmq" python3-zmq || return 1
  libzmq_python_ok || { log "python3-zmq is installed but $SYS_PYTHON cannot import zmq"; return 1; }
  log "python3-zmq installed: $SYS_PYTHON imports zmq (libzmq $("$SYS_PYTHON" -c 'import zmq; print(zmq.zmq_version())'))"
}

# The third-party clients tests/it/thirdparty.rs drives msgbench's servers with: Python modules of
# the system Python (module:package), then programs (binary:package).
PEER_MODULES=(pika:python3-pika paho.mqtt.client:python3-paho-mqtt websockets:python3-websockets proton:python3-qpid-proton)
PEER_BINARIES=(curl:curl nghttp:nghttp2-client tinyproxy:tinyproxy haproxy:haproxy)

peer_python_ok() { # the system Python imports every module of PEER_MODULES
  local m
  [ -x "$SYS_PYTHON" ] || return 1
  for m in "${PEER_MODULES[@]}"; do
    "$SYS_PYTHON" -c "import ${m%%:*}" >/dev/null 2>&1 || return 1
  done
}

peers_up() { # installs what is missing of PEER_MODULES and PEER_BINARIES; names what still is
  local m b missing=()
  for m in "${PEER_MODULES[@]}"; do
    [ -x "$SYS_PYTHON" ] && "$SYS_PYTHON" -c "import ${m%%:*}" >/dev/null 2>&1 && continue
    install_pkg "python3 module ${m%%:*}" "${m#*:}" \
      && "$SYS_PYTHON" -c "import ${m%%:*}" >/dev/null 2>&1 || missing+=("${m#*:}")
  done
  for b in "${PEER_BINARIES[@]}"; do
    need_pkg "${b%%:*}" "${b#*:}" && find_bin "${b%%:*}" >/dev/null || missing+=("${b#*:}")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    log "third-party clients missing: ${missing[*]} (install these Debian packages for" \
      "tests/it/thirdparty.rs)"
    return 1
  fi
  log "third-party clients ready: pika $("$SYS_PYTHON" -c 'import pika; print(pika.__version__)')," \
    "paho-mqtt $("$SYS_PYTHON" -c 'import paho.mqtt; print(paho.mqtt.__version__)')," \
    "websockets $("$SYS_PYTHON" -c 'import websockets; print(websockets.__version__)')," \
    "$("$(find_bin curl)" -V | head -n 1 | cut -d' ' -f1-2), $("$(find_bin nghttp)" --version)"
}

# A PID file alone cannot tell our broker from an unrelated process that got the same PID after
# ours died (a session's processes end before CI runs; CI then builds with thousands of short
# processes). Beside NAME.pid, NAME.start holds the process's start time (clock ticks since boot,
# field 22 of /proc/PID/stat): a broker counts as running, and is ever killed, only when both match.
proc_start() { # proc_start PID: prints the start time of PID, fails when there is no such process
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) } # past "pid (comm) ": comm may hold spaces
  read -ra fields <<<"$stat"
  echo "${fields[19]}"
}

record_pid() { # record_pid NAME PID
  echo "$2" >"$STATE/$1.pid"
  proc_start "$2" >"$STATE/$1.start" 2>/dev/null || : >"$STATE/$1.start"
}

running() { # running NAME
  local pidf="$STATE/$1.pid" pid start
  [ -f "$pidf" ] && [ -f "$STATE/$1.start" ] || return 1
  pid=$(cat "$pidf") && start=$(proc_start "$pid") || return 1
  [ "$start" = "$(cat "$STATE/$1.start")" ]
}

port_open() { # port_open PORT
  (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null
}

wait_port() { # wait_port PORT SECONDS [PID]: gives up early when PID has exited
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    port_open "$1" && return 0
    [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null && return 1
    sleep 0.1
  done
  return 1
}

# The functions below are called as `f || ...`, where set -e does not apply: every step that
# can fail says `|| return 1` itself.

nats_up() {
  if running nats; then log "nats-server already running (pid $(cat "$STATE/nats.pid"))"; return 0; fi
  need_pkg nats-server nats-server || return 1
  local bin; bin=$(find_bin nats-server) || return 1
  rm -rf "$STATE/nats-js"
  cat >"$STATE/nats.conf" <<CONF
listen: 127.0.0.1:$NATS_PORT
max_payload: 8MB
jetstream {
  store_dir: "$STATE/nats-js"
  max_memory_store: 1GB
  max_file_store: 4GB
}
# NATS over WebSocket (nats+ws://), plain: msgbench's WebSocket tunnel against a server it did
# not write.
websocket {
  listen: "127.0.0.1:$NATS_WS_PORT"
  no_tls: true
}
CONF
  "$bin" -c "$STATE/nats.conf" -l "$STATE/nats.log" >/dev/null 2>&1 &
  record_pid nats $!
  if ! wait_port "$NATS_PORT" 10 || ! wait_port "$NATS_WS_PORT" 10; then
    log "nats-server did not open 127.0.0.1:$NATS_PORT and $NATS_WS_PORT (see $STATE/nats.log)"; return 1
  fi
  log "nats-server up on nats://127.0.0.1:$NATS_PORT and nats+ws://127.0.0.1:$NATS_WS_PORT (pid $(cat "$STATE/nats.pid"))"
}

redis_up() {
  if running redis; then log "redis-server already running (pid $(cat "$STATE/redis.pid"))"; return 0; fi
  need_pkg redis-server redis-server || return 1
  local bin; bin=$(find_bin redis-server) || return 1
  tls_certs || return 1
  mkdir -p "$STATE/redis" || return 1
  cat >"$STATE/redis.conf" <<CONF
bind 127.0.0.1
port $REDIS_PORT
tls-port $REDIS_TLS_PORT
tls-cert-file $TLS/server.pem
tls-key-file $TLS/server.key
tls-ca-cert-file $TLS/ca.pem
tls-auth-clients optional
protected-mode yes
daemonize no
save ""
appendonly no
dir $STATE/redis
logfile $STATE/redis.log
maxmemory 1gb
maxmemory-policy noeviction
CONF
  "$bin" "$STATE/redis.conf" >/dev/null 2>&1 &
  record_pid redis $!
  if ! wait_port "$REDIS_PORT" 10; then
    log "redis-server did not open 127.0.0.1:$REDIS_PORT (see $STATE/redis.log)"; return 1
  fi
  log "redis-server up on redis://127.0.0.1:$REDIS_PORT and rediss://localhost:$REDIS_TLS_PORT (pid $(cat "$STATE/redis.pid"))"
}

# gen_leaf NAME CN EXTENSIONS: key + certificate signed by the test CA, X.509 v3, 10 years.
gen_leaf() {
  openssl req -new -newkey rsa:2048 -nodes -subj "/CN=$2" \
    -keyout "$TLS/$1.key" -out "$TLS/$1.csr" 2>>"$TLS/openssl.log" || return 1
  openssl x509 -req -in "$TLS/$1.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile <(printf '%s\n' "$3") -out "$TLS/$1.pem" 2>>"$TLS/openssl.log" \
    || return 1
  rm -f "$TLS/$1.csr"
}

# tls_certs: CA (ca.pem/ca.key), server (server.pem/.key, localhost + 127.0.0.1) and client
# (client.pem/.key) certificates, generated only when missing. Keys are 0600, owned by whoever
# runs this script, which is also the user mosquitto runs as (see `user` in mosquitto_conf).
tls_certs() {
  mkdir -p "$TLS" && chmod 700 "$TLS" || return 1
  local umask_was; umask_was=$(umask); umask 077
  local rc=0
  if [ ! -s "$TLS/ca.pem" ] || [ ! -s "$TLS/ca.key" ]; then
    log "generating test CA in $TLS"
    rm -f "$TLS"/server.* "$TLS"/client.* # signed by an old CA: useless now
    openssl req -x509 -new -newkey rsa:2048 -nodes -days 3650 -sha256 \
      -subj "/CN=msgbench test CA" -keyout "$TLS/ca.key" -out "$TLS/ca.pem" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -addext "subjectKeyIdentifier=hash" 2>>"$TLS/openssl.log" || rc=1
  fi
  if [ "$rc" = 0 ] && { [ ! -s "$TLS/server.pem" ] || [ ! -s "$TLS/server.key" ]; }; then
    log "generating server certificate (localhost, 127.0.0.1)"
    gen_leaf server localhost "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid" || rc=1
  fi
  if [ "$rc" = 0 ] && { [ ! -s "$TLS/client.pem" ] || [ ! -s "$TLS/client.key" ]; }; then
    log "generating client certificate"
    gen_leaf client msgbench-client "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid" || rc=1
  fi
  umask "$umask_was"
  [ "$rc" = 0 ] || log "certificate generation failed (see $TLS/openssl.log)"
  return "$rc"
}

# Options checked against mosquitto.conf(5) of mosquitto 2.0.11.
mosquitto_conf() {
  cat <<CONF
# Written by scripts/brokers.sh; rewritten on every \`up\`.
# No privilege drop when started as root, so it reads the 0600 files in $STATE.
user root
per_listener_settings true
persistence false
set_tcp_nodelay true
max_keepalive 65535
max_inflight_messages 0
max_queued_messages 100000
log_dest stderr
connection_messages false

listener $MQTT_PORT 127.0.0.1
max_connections -1
allow_anonymous true

listener $MQTT_AUTH_PORT 127.0.0.1
max_connections -1
allow_anonymous false
password_file $STATE/mosquitto.passwd

listener $MQTTS_PORT 127.0.0.1
max_connections -1
allow_anonymous true
cafile $TLS/ca.pem
certfile $TLS/server.pem
keyfile $TLS/server.key
require_certificate false
CONF
}

# nofile_limit: the open-files limit a child can get: 1048576, else the hard limit, else as is.
nofile_limit() {
  (ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null; ulimit -n)
}

mosquitto_up() {
  if running mosquitto; then log "mosquitto already running (pid $(cat "$STATE/mosquitto.pid"))"; return 0; fi
  need_pkg mosquitto mosquitto || return 1
  local bin passwd port nofile pid
  bin=$(find_bin mosquitto) || return 1
  passwd=$(find_bin mosquitto_passwd) || { log "mosquitto_passwd not found (package 'mosquitto')"; return 1; }
  for port in "$MQTT_PORT" "$MQTT_AUTH_PORT" "$MQTTS_PORT"; do
    if port_open "$port"; then log "mosquitto: 127.0.0.1:$port is already taken by another process"; return 1; fi
  done
  tls_certs || return 1
  rm -f "$STATE/mosquitto.passwd"
  (umask 077 && "$passwd" -b -c "$STATE/mosquitto.passwd" "$MQTT_USER" "$MQTT_PASS") \
    >>"$STATE/mosquitto.log" 2>&1 || { log "mosquitto_passwd failed (see $STATE/mosquitto.log)"; return 1; }
  mosquitto_conf >"$STATE/mosquitto.conf" || return 1
  nofile=$(nofile_limit)
  (ulimit -n "$nofile" && exec "$bin" -c "$STATE/mosquitto.conf") >>"$STATE/mosquitto.log" 2>&1 &
  pid=$!
  record_pid mosquitto "$pid"
  for port in "$MQTT_PORT" "$MQTT_AUTH_PORT" "$MQTTS_PORT"; do
    if ! wait_port "$port" 10 "$pid" || ! kill -0 "$pid" 2>/dev/null; then
      log "mosquitto did not open 127.0.0.1:$port (see $STATE/mosquitto.log)"; stop mosquitto; return 1
    fi
  done
  # The limit the process really has, when /proc tells.
  nofile=$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null || true)
  nofile=${nofile:-$(nofile_limit)}
  log "mosquitto up on mqtt://127.0.0.1:$MQTT_PORT, mqtt://127.0.0.1:$MQTT_AUTH_PORT (auth)," \
    "mqtts://localhost:$MQTTS_PORT (pid $pid, open files limit $nofile)"
  if [ "$nofile" != unlimited ] && [ "$nofile" -lt 1048576 ]; then
    log "note: mosquitto's open files limit is $nofile, not 1048576 (hard limit too low to raise);" \
      "it caps the connections mosquitto can hold"
  fi
}

# rmq_env: the environment our node and our rabbitmqctl calls share. HOME holds the Erlang
# cookie; RABBITMQ_CONF_ENV_FILE points away from /etc/rabbitmq/rabbitmq-env.conf; the CLI
# tools' own distribution ports follow the node's, as their default range starts at 35672.
rmq_env() {
  printf '%s\n' "HOME=$RMQ" "ERL_EPMD_PORT=$EPMD_PORT" ERL_EPMD_ADDRESS=127.0.0.1 \
    "RABBITMQ_NODENAME=$RMQ_NODE" "RABBITMQ_CONF_ENV_FILE=$RMQ/rabbitmq-env.conf" \
    "RABBITMQ_CONFIG_FILE=$RMQ/rabbitmq.conf" "RABBITMQ_ADVANCED_CONFIG_FILE=$RMQ/advanced.config" \
    "RABBITMQ_ENABLED_PLUGINS_FILE=$RMQ/enabled_plugins" "RABBITMQ_MNESIA_BASE=$RMQ/mnesia" \
    "RABBITMQ_LOG_BASE=$RMQ/log" "RABBITMQ_PID_FILE=$RMQ/beam.pid" \
    "RABBITMQ_DIST_PORT=$AMQP_DIST_PORT" \
    "RABBITMQ_CTL_DIST_PORT_MIN=$((AMQP_DIST_PORT + 1))" \
    "RABBITMQ_CTL_DIST_PORT_MAX=$((AMQP_DIST_PORT + 11))"
}

rmqctl() { # rmqctl ARGS...: rabbitmqctl against our node
  local envs; mapfile -t envs < <(rmq_env)
  env "${envs[@]}" "$RMQ_BIN/rabbitmqctl" -n "$RMQ_NODE" "$@"
}

# Keys checked against the rabbit schema of rabbitmq-server 3.10.8.
rabbitmq_conf() {
  cat <<CONF
# Written by scripts/brokers.sh; rewritten on every \`up\`.
listeners.tcp.1 = 127.0.0.1:$AMQP_PORT
distribution.listener.interface = 127.0.0.1
distribution.listener.port_range.min = $AMQP_DIST_PORT
distribution.listener.port_range.max = $AMQP_DIST_PORT
# guest may log in from loopback only (the default, stated here).
loopback_users.guest = true
log.console = false
log.file.level = info
# MQTT plugin: the other end of cross-protocol pipeline tests (AMQP amq.topic <-> MQTT).
mqtt.listeners.tcp.default = 127.0.0.1:$RMQ_MQTT_PORT
mqtt.allow_anonymous = true
mqtt.default_user = guest
mqtt.default_pass = guest
# MQTT over WebSocket (web_mqtt plugin, endpoint /ws): msgbench's mqtt+ws:// against a server
# it did not write.
web_mqtt.tcp.ip = 127.0.0.1
web_mqtt.tcp.port = $RMQ_WS_MQTT_PORT
CONF
}

epmd_up() { # our own epmd, on loopback and a port of its own
  running epmd && return 0
  local bin; bin=$(find_bin epmd) || { log "epmd not found (package 'erlang-base')"; return 1; }
  if port_open "$EPMD_PORT"; then
    # An epmd on our port is one an Erlang tool of ours started on its own (rabbitmqctl does
    # when the node is down): take it over rather than fail.
    local pid
    pid=$(ss -ltnpH "sport = :$EPMD_PORT" 2>/dev/null | grep -o '"epmd",pid=[0-9]*' | head -1 | cut -d= -f2)
    if [ -n "$pid" ]; then record_pid epmd "$pid"; return 0; fi
    log "epmd: 127.0.0.1:$EPMD_PORT is already taken by another process"; return 1
  fi
  "$bin" -port "$EPMD_PORT" -address 127.0.0.1 >>"$STATE/epmd.log" 2>&1 &
  record_pid epmd $!
  wait_port "$EPMD_PORT" 10 "$!" || { log "epmd did not open 127.0.0.1:$EPMD_PORT (see $STATE/epmd.log)"; stop epmd; return 1; }
}

rabbitmq_beam_pid() { # rabbitmq.pid: the Erlang VM's PID instead of its start script's, once known
  if [ -s "$RMQ/beam.pid" ] && kill -0 "$(cat "$RMQ/beam.pid")" 2>/dev/null; then
    record_pid rabbitmq "$(cat "$RMQ/beam.pid")"
  fi
}

rabbitmq_up() {
  if running rabbitmq; then log "rabbitmq already running (pid $(cat "$STATE/rabbitmq.pid"))"; return 0; fi
  need_pkg rabbitmq-server rabbitmq-server || return 1
  [ -x "$RMQ_BIN/rabbitmq-server" ] || { log "$RMQ_BIN/rabbitmq-server is missing (package 'rabbitmq-server')"; return 1; }
  local t0=$SECONDS
  # A fresh node every time: no queues or messages left over from an earlier run.
  rm -rf "$RMQ/mnesia" "$RMQ/log" "$RMQ/beam.pid"
  rabbitmq_start || return 1
  log "rabbitmq up on amqp://127.0.0.1:$AMQP_PORT (AMQP 0-9-1 and 1.0), mqtt://127.0.0.1:$RMQ_MQTT_PORT and mqtt+ws://127.0.0.1:$RMQ_WS_MQTT_PORT/ws (node $RMQ_NODE," \
    "pid $(cat "$STATE/rabbitmq.pid"), open files limit $RMQ_NOFILE, $((SECONDS - t0)) s)"
}

# rabbitmq_start: starts the node on the data it has (rabbitmq_up wipes it first; kill-restart
# does not, so durable queues and persistent messages survive) and waits until it serves.
rabbitmq_start() {
  local port nofile pid envs
  for port in "$AMQP_PORT" "$AMQP_DIST_PORT" "$RMQ_MQTT_PORT" "$RMQ_WS_MQTT_PORT"; do
    if port_open "$port"; then log "rabbitmq: 127.0.0.1:$port is already taken by another process"; return 1; fi
  done
  rm -f "$RMQ/beam.pid"
  mkdir -p "$RMQ/mnesia" "$RMQ/log" && chmod 700 "$RMQ" || return 1
  if [ ! -s "$RMQ/.erlang.cookie" ]; then
    (umask 077 && openssl rand -hex 20 >"$RMQ/.erlang.cookie") || { log "could not write the Erlang cookie"; return 1; }
  fi
  chmod 400 "$RMQ/.erlang.cookie" || return 1
  rabbitmq_conf >"$RMQ/rabbitmq.conf" || return 1
  # MQTT and AMQP 1.0 (served on the AMQP port); no management UI.
  echo '[rabbitmq_mqtt,rabbitmq_web_mqtt,rabbitmq_amqp1_0].' >"$RMQ/enabled_plugins" || return 1
  : >"$RMQ/rabbitmq-env.conf" || return 1
  epmd_up || return 1
  nofile=$(nofile_limit)
  mapfile -t envs < <(rmq_env)
  # Foreground mode: the script stays as parent of the Erlang VM and passes SIGTERM on. The VM
  # writes its own PID to $RMQ/beam.pid, which replaces the script's in rabbitmq.pid below.
  (ulimit -n "$nofile" && cd "$RMQ" && exec env "${envs[@]}" ERL_MAX_PORTS="$nofile" \
    "$RMQ_BIN/rabbitmq-server") >>"$STATE/rabbitmq.log" 2>&1 &
  pid=$!
  record_pid rabbitmq "$pid"
  if ! wait_port "$AMQP_PORT" 60 "$pid" || ! rmqctl await_startup --timeout 30 >>"$STATE/rabbitmq.log" 2>&1; then
    log "rabbitmq did not open 127.0.0.1:$AMQP_PORT (see $STATE/rabbitmq.log and $RMQ/log/)"
    rabbitmq_beam_pid; stop rabbitmq; stop epmd; return 1
  fi
  rabbitmq_beam_pid
  if ! wait_port "$RMQ_MQTT_PORT" 20; then
    log "rabbitmq's MQTT plugin did not open 127.0.0.1:$RMQ_MQTT_PORT (see $RMQ/log/)"
    stop rabbitmq; stop epmd; return 1
  fi
  if ! wait_port "$RMQ_WS_MQTT_PORT" 20; then
    log "rabbitmq's web_mqtt plugin did not open 127.0.0.1:$RMQ_WS_MQTT_PORT (see $RMQ/log/)"
    stop rabbitmq; stop epmd; return 1
  fi
  pid=$(cat "$STATE/rabbitmq.pid")
  nofile=$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null || true)
  RMQ_NOFILE=${nofile:-$(nofile_limit)}
}

rabbitmq_down() {
  if running rabbitmq; then
    # A clean stop first (it waits for the VM to exit); `stop` then kills what is left by PID.
    if rmqctl stop "$STATE/rabbitmq.pid" >>"$STATE/rabbitmq.log" 2>&1; then
      log "rabbitmq stopped"
    else
      log "rabbitmqctl stop failed (see $STATE/rabbitmq.log): killing the node by PID"
    fi
  fi
  stop rabbitmq
  stop epmd
}

rabbitmq_restart() { # rabbitmq_restart SECONDS
  running rabbitmq || { log "rabbitmq is not running (scripts/brokers.sh up)"; return 1; }
  rmqctl stop_app >>"$STATE/rabbitmq.log" 2>&1 || { log "rabbitmqctl stop_app failed (see $STATE/rabbitmq.log)"; return 1; }
  sleep "$1"
  rmqctl start_app >>"$STATE/rabbitmq.log" 2>&1 || { log "rabbitmqctl start_app failed (see $STATE/rabbitmq.log)"; return 1; }
  wait_port "$AMQP_PORT" 30 || { log "rabbitmq did not listen again on 127.0.0.1:$AMQP_PORT"; return 1; }
  log "rabbitmq restarted"
}

# Directives checked against the documentation of nginx 1.22 (Debian 12's package).
nginx_conf() {
  local user=""
  # Started as root, the workers would switch to the package's user, who cannot read $STATE.
  [ "$(id -u)" = 0 ] && user="user root;"
  cat <<CONF
# Written by scripts/brokers.sh; rewritten on every \`up\`.
$user
daemon off;
master_process on;
worker_processes 2;
pid $NGINX/nginx.pid;
error_log $NGINX/error.log warn;
events {
  worker_connections 16384;
}
http {
  access_log off;
  default_type text/plain;
  # Request bodies up to this size stay in memory (no temporary files per POST).
  client_body_buffer_size 1m;
  client_max_body_size 16m;
  client_body_temp_path $NGINX/tmp/body;
  proxy_temp_path $NGINX/tmp/proxy;
  fastcgi_temp_path $NGINX/tmp/fastcgi;
  uwsgi_temp_path $NGINX/tmp/uwsgi;
  scgi_temp_path $NGINX/tmp/scgi;
  # A benchmark's connections should live as long as the run (defaults: 1000 requests, 75 s);
  # keepalive_requests also bounds HTTP/2 connections since 1.19.7.
  keepalive_requests 1000000000;
  keepalive_timeout 300s;
  http2_max_concurrent_streams 1024;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { return 200 "ok\\n"; }
  }
  server {
    listen 127.0.0.1:$NGINX_H2C_PORT http2;
    location / { return 200 "ok\\n"; }
  }
  server {
    listen 127.0.0.1:$NGINX_TLS_PORT ssl http2;
    # nginx's default, below the window of the test that checks clients keep to it.
    http2_max_concurrent_streams 128;
    ssl_certificate $TLS/server.pem;
    ssl_certificate_key $TLS/server.key;
    location / { return 200 "ok\\n"; }
  }
}
CONF
}

nginx_up() {
  if running nginx; then log "nginx already running (pid $(cat "$STATE/nginx.pid"))"; return 0; fi
  need_pkg nginx nginx || return 1
  local bin port nofile pid
  bin=$(find_bin nginx) || return 1
  for port in "$NGINX_PORT" "$NGINX_H2C_PORT" "$NGINX_TLS_PORT"; do
    if port_open "$port"; then log "nginx: 127.0.0.1:$port is already taken by another process"; return 1; fi
  done
  tls_certs || return 1
  mkdir -p "$NGINX/tmp" || return 1
  nginx_conf >"$NGINX/nginx.conf" || return 1
  if ! "$bin" -t -q -p "$NGINX/" -e "$NGINX/error.log" -c "$NGINX/nginx.conf" >>"$STATE/nginx.log" 2>&1; then
    log "nginx rejects its configuration (see $STATE/nginx.log and $NGINX/error.log)"; return 1
  fi
  nofile=$(nofile_limit)
  (ulimit -n "$nofile" && exec "$bin" -p "$NGINX/" -e "$NGINX/error.log" -c "$NGINX/nginx.conf") \
    >>"$STATE/nginx.log" 2>&1 &
  pid=$!
  record_pid nginx "$pid"
  for port in "$NGINX_PORT" "$NGINX_H2C_PORT" "$NGINX_TLS_PORT"; do
    if ! wait_port "$port" 10 "$pid" || ! kill -0 "$pid" 2>/dev/null; then
      log "nginx did not open 127.0.0.1:$port (see $NGINX/error.log)"; stop nginx; return 1
    fi
  done
  log "nginx up on http://127.0.0.1:$NGINX_PORT/, h2c http://127.0.0.1:$NGINX_H2C_PORT/," \
    "https://127.0.0.1:$NGINX_TLS_PORT/ (pid $pid)"
}

# artemis_dist: the unpacked distribution, fetched once with Maven by its coordinates (the
# tarball is kept in $ARTEMIS, so later `up`s need no network).
artemis_dist() {
  local dist="$ARTEMIS/apache-artemis-$ARTEMIS_VERSION" tgz="$ARTEMIS/apache-artemis-$ARTEMIS_VERSION-bin.tar.gz"
  [ -x "$dist/bin/artemis" ] && return 0
  mkdir -p "$ARTEMIS" || return 1
  if [ ! -s "$tgz" ]; then
    need_pkg mvn maven || return 1
    log "fetching ActiveMQ Artemis $ARTEMIS_VERSION with Maven"
    "$(find_bin mvn)" -q -B dependency:copy \
      "-Dartifact=org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin" \
      "-DoutputDirectory=$ARTEMIS" >"$ARTEMIS/fetch.log" 2>&1 \
      || { log "could not fetch Artemis with Maven (see $ARTEMIS/fetch.log)"; rm -f "$tgz"; return 1; }
  fi
  tar -xzf "$tgz" -C "$ARTEMIS" || { log "could not unpack $tgz"; rm -rf "$dist"; return 1; }
  [ -x "$dist/bin/artemis" ] || { log "$dist/bin/artemis is missing after unpacking"; return 1; }
}

# artemis_acceptors: the acceptors of our instance (replacing those `artemis create` wrote).
# Options as in the AMQP acceptor `artemis create` writes; TLS from a PKCS#12 copy of the test
# server certificate.
artemis_acceptors() {
  local opts="protocols=AMQP;useEpoll=true;amqpCredits=1000;amqpLowCredits=300;amqpMinLargeMessageSize=102400;amqpDuplicateDetection=true;tcpSendBufferSize=1048576;tcpReceiveBufferSize=1048576"
  cat <<XML
      <acceptors>
         <acceptor name="amqp">tcp://127.0.0.1:$ARTEMIS_PORT?$opts</acceptor>
         <acceptor name="amqps">tcp://127.0.0.1:$ARTEMIS_TLS_PORT?$opts;sslEnabled=true;keyStorePath=$ARTEMIS/server.p12;keyStoreType=PKCS12;keyStorePassword=$ARTEMIS_PASS</acceptor>
         <acceptor name="mqtt">tcp://127.0.0.1:$ARTEMIS_MQTT_PORT?protocols=MQTT;useEpoll=true</acceptor>
      </acceptors>
XML
}

# artemis_create: a fresh instance in $ARTEMIS/instance (configuration and empty data).
artemis_create() {
  local dist="$ARTEMIS/apache-artemis-$ARTEMIS_VERSION" inst="$ARTEMIS/instance" xml
  rm -rf "$inst"
  "$dist/bin/artemis" create "$inst" --silent --force --user "$ARTEMIS_USER" --password "$ARTEMIS_PASS" \
    --require-login --no-web --host 127.0.0.1 --name msgbench --java-memory 1G --nio --autodelete \
    --no-hornetq-acceptor --no-mqtt-acceptor --no-stomp-acceptor >"$ARTEMIS/create.log" 2>&1 \
    || { log "artemis create failed (see $ARTEMIS/create.log)"; return 1; }
  rm -f "$ARTEMIS/server.p12"
  (umask 077 && openssl pkcs12 -export -in "$TLS/server.pem" -inkey "$TLS/server.key" -name server \
    -passout "pass:$ARTEMIS_PASS" -out "$ARTEMIS/server.p12") 2>>"$ARTEMIS/create.log" \
    || { log "could not write the PKCS#12 key store (see $ARTEMIS/create.log)"; return 1; }
  xml="$inst/etc/broker.xml"
  # Our acceptors instead of the generated ones; no auto-creation under `noauto.`, and
  # addresses under `full.` refuse messages past 256 KiB (the settings with the longer match win
  # over the catch-all `#`). No disk-usage limit: by default Artemis blocks every producer once
  # the file system is 90% full (whoever filled it), which turns a busy build machine into
  # hung test runs; our data is small and wiped on every `up`.
  awk -v acceptors="$(artemis_acceptors)" '
    /<max-disk-usage>/ { sub(/<max-disk-usage>[^<]*</, "<max-disk-usage>-1<") }
    /<acceptors>/ { print acceptors; skip = 1; next }
    /<\/acceptors>/ { skip = 0; next }
    skip { next }
    /<address-settings>/ {
      print
      print "         <address-setting match=\"noauto.#\">"
      print "            <auto-create-queues>false</auto-create-queues>"
      print "            <auto-create-addresses>false</auto-create-addresses>"
      print "         </address-setting>"
      print "         <address-setting match=\"full.#\">"
      print "            <max-size-bytes>262144</max-size-bytes>"
      print "            <address-full-policy>FAIL</address-full-policy>"
      print "         </address-setting>"
      next
    }
    { print }' "$xml" >"$xml.new" && mv "$xml.new" "$xml" || return 1
  grep -q "name=\"amqps\"" "$xml" && grep -q 'match="noauto.#"' "$xml" && grep -q 'match="full.#"' "$xml" \
    && grep -q '<max-disk-usage>-1<' "$xml" \
    || { log "could not configure $xml"; return 1; }
}

# artemis_start: runs the instance in the foreground of a background job (`artemis run` execs
# the JVM, so the PID recorded is the broker's) and waits until its ports answer.
artemis_start() {
  local pid port nofile
  for port in "$ARTEMIS_PORT" "$ARTEMIS_TLS_PORT" "$ARTEMIS_MQTT_PORT"; do
    if port_open "$port"; then log "artemis: 127.0.0.1:$port is already taken by another process"; return 1; fi
  done
  nofile=$(nofile_limit)
  (ulimit -n "$nofile" && exec "$ARTEMIS/instance/bin/artemis" run) >>"$STATE/artemis.log" 2>&1 &
  pid=$!
  record_pid artemis "$pid"
  for port in "$ARTEMIS_PORT" "$ARTEMIS_TLS_PORT" "$ARTEMIS_MQTT_PORT"; do
    if ! wait_port "$port" 90 "$pid"; then
      log "artemis did not open 127.0.0.1:$port (see $STATE/artemis.log and $ARTEMIS/instance/log/)"
      stop artemis; return 1
    fi
  done
}

artemis_up() {
  if running artemis; then log "artemis already running (pid $(cat "$STATE/artemis.pid"))"; return 0; fi
  need_pkg java default-jre-headless || return 1
  local t0=$SECONDS
  tls_certs || return 1
  artemis_dist || return 1
  artemis_create || return 1
  artemis_start || return 1
  log "artemis up on amqp10://127.0.0.1:$ARTEMIS_PORT, amqp10s://localhost:$ARTEMIS_TLS_PORT and mqtt(+ws)://127.0.0.1:$ARTEMIS_MQTT_PORT" \
    "(pid $(cat "$STATE/artemis.pid"), $((SECONDS - t0)) s)"
}

artemis_restart() { # artemis_restart SECONDS
  running artemis || { log "artemis is not running (scripts/brokers.sh up)"; return 1; }
  stop artemis
  sleep "$1"
  artemis_start || return 1
  log "artemis restarted"
}

# kill_restart NAME SECONDS: the broker's main process (rabbitmq: the Erlang VM; artemis, kafka:
# the JVM) killed with SIGKILL, as a crash or the OOM killer would, then started again after
# SECONDS on the data it left (nothing is wiped: what it had made durable must be there).
kill_restart() {
  local pid i
  case "$1" in rabbitmq | artemis | kafka) ;; *) log "kill-restart: rabbitmq, artemis or kafka"; return 1 ;; esac
  running "$1" || { log "$1 is not running (scripts/brokers.sh up)"; return 1; }
  pid=$(cat "$STATE/$1.pid")
  kill -9 "$pid" || return 1
  for ((i = 0; i < 100; i++)); do running "$1" || break; sleep 0.1; done
  running "$1" && { log "$1 (pid $pid) survived SIGKILL"; return 1; }
  rm -f "$STATE/$1.pid" "$STATE/$1.start"
  sleep "$2"
  case "$1" in
    rabbitmq) rabbitmq_start ;;
    artemis) artemis_start ;;
    kafka) kafka_up ;;
  esac || { log "$1 did not start again after SIGKILL"; return 1; }
  log "$1 killed (SIGKILL, pid $pid) and started again (pid $(cat "$STATE/$1.pid"))"
}

# pause NAME SECONDS: the broker frozen with SIGSTOP, then resumed with SIGCONT: its connections
# stay open and nothing answers meanwhile (a long GC pause, a stalled VM).
pause() {
  local pid
  running "$1" || { log "$1 is not running (scripts/brokers.sh up)"; return 1; }
  pid=$(cat "$STATE/$1.pid")
  kill -STOP "$pid" || return 1
  sleep "$2"
  kill -CONT "$pid" || return 1
  log "$1 (pid $pid) paused for $2 s"
}

# kafka_libs: the broker's jars (kafka_2.13, kafka-tools and their runtime dependencies), fetched
# once with Maven by their coordinates through a generated pom (later `up`s need no network).
kafka_libs() {
  local libs="$KAFKA/libs"
  [ -s "$KAFKA/libs.ok" ] && [ "$(cat "$KAFKA/libs.ok")" = "$KAFKA_VERSION-2" ] && return 0
  need_pkg mvn maven || return 1
  mkdir -p "$KAFKA" && rm -rf "$libs" || return 1
  cat >"$KAFKA/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>msgbench</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <!-- The broker's logging as its distribution ships it (SLF4J 2 to Log4j 2): without these,
         Maven resolves SLF4J 1.7 with no binding and the broker logs nothing. -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.25.5</version></dependency>
  </dependencies>
</project>
POM
  log "fetching Apache Kafka $KAFKA_VERSION with Maven"
  "$(find_bin mvn)" -q -B -f "$KAFKA/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    "-DoutputDirectory=$libs" >"$KAFKA/fetch.log" 2>&1 \
    || { log "could not fetch Kafka with Maven (see $KAFKA/fetch.log)"; rm -rf "$libs"; return 1; }
  ls "$libs"/kafka_2.13-*.jar >/dev/null 2>&1 || { log "kafka_2.13 jar missing in $libs"; return 1; }
  echo "$KAFKA_VERSION-2" >"$KAFKA/libs.ok"
}

kafka_conf() {
  cat <<CONF
# Written by scripts/brokers.sh; rewritten on every \`up\`.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SSL://127.0.0.1:$KAFKA_TLS_PORT,PROXIED://127.0.0.1:$KAFKA_PROXIED_PORT,SASL://127.0.0.1:$KAFKA_SASL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SSL://localhost:$KAFKA_TLS_PORT,PROXIED://127.0.0.1:$((KAFKA_PROXIED_PORT + 1)),SASL://127.0.0.1:$KAFKA_SASL_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,PROXIED:PLAINTEXT,SASL:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-secret";
# SCRAM users live in the cluster's metadata: \`up\` adds bench's once the broker answers.
listener.name.sasl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$KAFKA/server-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS/ca.pem
ssl.client.auth=requested
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=1
log.segment.bytes=268435456
CONF
}

kafka_java() { # kafka_java CLASS ARGS...: runs a Kafka class with our jars
  java -Xmx1g -Xms256m -cp "$KAFKA/libs/*" -Dlog4j2.configurationFile="$KAFKA/log4j2.properties" "$@"
}

# kafka_build_deps: what building librdkafka from the source rdkafka-sys bundles needs (the
# Kafka driver links it statically); `up` installs it because the test script builds after
# starting the brokers.
kafka_build_deps() {
  need_pkg cc build-essential || return 1
  need_pkg make make || return 1
  need_pkg pkg-config pkg-config || return 1
  pkg-config --exists openssl 2>/dev/null || install_pkg "OpenSSL's headers (pkg-config openssl)" libssl-dev || return 1
  pkg-config --exists zlib 2>/dev/null || install_pkg "zlib's headers (pkg-config zlib)" zlib1g-dev || return 1
}

kafka_up() {
  kafka_build_deps || return 1
  if running kafka; then log "kafka already running (pid $(cat "$STATE/kafka.pid"))"; return 0; fi
  need_pkg java default-jre-headless || return 1
  local t0=$SECONDS pid port
  kafka_libs || return 1
  tls_certs || return 1
  # The SSL listener's key and certificate in one PEM file (Kafka's PEM keystore).
  (umask 077 && cat "$TLS/server.key" "$TLS/server.pem" >"$KAFKA/server-keystore.pem") || return 1
  kafka_conf >"$KAFKA/server.properties" || return 1
  cat >"$KAFKA/log4j2.properties" <<'LOG4J'
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
LOG4J
  local fresh=0
  if [ ! -f "$KAFKA/data/meta.properties" ]; then
    fresh=1
    log "formatting Kafka storage in $KAFKA/data"
    kafka_java kafka.tools.StorageTool format -t "$(kafka_java kafka.tools.StorageTool random-uuid)" \
      -c "$KAFKA/server.properties" >"$KAFKA/format.log" 2>&1 \
      || { log "kafka storage format failed (see $KAFKA/format.log)"; return 1; }
  fi
  for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_TLS_PORT" "$KAFKA_PROXIED_PORT" "$KAFKA_SASL_PORT"; do
    if port_open "$port"; then log "kafka: 127.0.0.1:$port is already taken by another process"; return 1; fi
  done
  (exec java -Xmx1g -Xms1g -XX:+UseG1GC -cp "$KAFKA/libs/*" \
    -Dlog4j2.configurationFile="$KAFKA/log4j2.properties" kafka.Kafka "$KAFKA/server.properties") \
    >>"$STATE/kafka.log" 2>&1 &
  pid=$!
  record_pid kafka "$pid"
  if ! wait_port "$KAFKA_PORT" 90 "$pid"; then
    log "kafka did not open 127.0.0.1:$KAFKA_PORT (see $STATE/kafka.log)"; stop kafka; return 1
  fi
  if ! wait_port "$KAFKA_TLS_PORT" 30 "$pid"; then
    log "kafka did not open its SSL listener 127.0.0.1:$KAFKA_TLS_PORT (see $STATE/kafka.log)"; stop kafka; return 1
  fi
  # The SCRAM credentials of user bench (the same password as PLAIN's), one mechanism per
  # request (Kafka refuses two changes of one user's credentials in one); setting them again
  # on a later `up` changes nothing.
  local mech
  : >"$KAFKA/scram.log"
  for mech in SCRAM-SHA-256 SCRAM-SHA-512; do
    if ! kafka_java org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
        --alter --entity-type users --entity-name bench --add-config "$mech=[password=bench-secret]" \
        >>"$KAFKA/scram.log" 2>&1; then
      log "kafka: adding the $mech user failed (see $KAFKA/scram.log); $mech logins will fail"
    fi
  done
  # A freshly formatted broker creates its group-offsets topic when the first consumer group
  # looks for its coordinator, which then waits seconds: the first test with a short connect
  # time-out failed there on a fresh machine. One consumer's look now makes it.
  if [ "$fresh" = 1 ]; then
    kafka_java org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
      --topic msgbench.warmup --group msgbench.warmup --timeout-ms 8000 >"$KAFKA/warmup.log" 2>&1 || true
  fi
  log "kafka up on kafka://127.0.0.1:$KAFKA_PORT and kafka+ssl://localhost:$KAFKA_TLS_PORT (pid $pid, $((SECONDS - t0)) s)"
}

# qpid_libs: Broker-J's jars, fetched once with Maven by their coordinates through a generated
# pom (later `up`s need no network). The launcher's own artifact comes without its dependencies
# (the management console, the Derby and JDBC stores, ...): the broker runs without them.
qpid_libs() {
  local libs="$QPID/libs"
  [ -s "$QPID/libs.ok" ] && [ "$(cat "$QPID/libs.ok")" = "$QPID_VERSION-1" ] && return 0
  need_pkg mvn maven || return 1
  mkdir -p "$QPID" && rm -rf "$libs" || return 1
  local dep a deps=""
  for a in qpid-broker-core qpid-broker-plugins-amqp-0-8-protocol qpid-broker-plugins-amqp-1-0-protocol \
    qpid-broker-plugins-memory-store qpid-broker-plugins-logging-logback; do
    deps+="    <dependency><groupId>org.apache.qpid</groupId><artifactId>$a</artifactId><version>$QPID_VERSION</version></dependency>
"
  done
  cat >"$QPID/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>msgbench</groupId><artifactId>qpid-broker-j</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.qpid</groupId><artifactId>qpid-broker</artifactId><version>$QPID_VERSION</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>commons-cli</groupId><artifactId>commons-cli</artifactId><version>1.6.0</version></dependency>
$deps  </dependencies>
</project>
POM
  log "fetching Qpid Broker-J $QPID_VERSION with Maven"
  "$(find_bin mvn)" -q -B -f "$QPID/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    "-DoutputDirectory=$libs" >"$QPID/fetch.log" 2>&1 \
    || { log "could not fetch Qpid Broker-J with Maven (see $QPID/fetch.log)"; rm -rf "$libs"; return 1; }
  ls "$libs"/qpid-broker-"$QPID_VERSION".jar >/dev/null 2>&1 || { log "qpid-broker jar missing in $libs"; return 1; }
  echo "$QPID_VERSION-1" >"$QPID/libs.ok"
}

# qpid_conf: the broker's initial configuration (kept in memory, so every start begins from it).
qpid_conf() {
  cat <<JSON
{
  "name": "msgbench",
  "modelVersion": "9.0",
  "authenticationproviders": [ {
    "name": "passwords", "type": "Plain",
    "users": [ { "name": "$ARTEMIS_USER", "type": "managed", "password": "$ARTEMIS_PASS" } ]
  } ],
  "ports": [ {
    "name": "AMQP", "port": "$QPID_PORT", "bindingAddress": "127.0.0.1",
    "protocols": [ "AMQP_0_9_1", "AMQP_1_0" ],
    "authenticationProvider": "passwords",
    "virtualhostaliases": [
      { "name": "nameAlias", "type": "nameAlias" },
      { "name": "defaultAlias", "type": "defaultAlias" },
      { "name": "hostnameAlias", "type": "hostnameAlias" } ]
  } ],
  "virtualhostnodes": [ {
    "name": "default", "type": "Memory", "defaultVirtualHostNode": "true",
    "virtualHostInitialConfiguration": "{\\"type\\":\\"Memory\\",\\"nodeAutoCreationPolicies\\":[{\\"pattern\\":\\".*\\",\\"nodeType\\":\\"Queue\\",\\"createdOnPublish\\":true,\\"createdOnConsume\\":true}]}"
  }, {
    "name": "other", "type": "Memory",
    "virtualHostInitialConfiguration": "{\\"type\\":\\"Memory\\"}"
  } ]
}
JSON
}

qpid_up() {
  if running qpid; then log "qpid already running (pid $(cat "$STATE/qpid.pid"))"; return 0; fi
  need_pkg java default-jre-headless || return 1
  local t0=$SECONDS pid
  qpid_libs || return 1
  qpid_conf >"$QPID/config.json" || return 1
  if port_open "$QPID_PORT"; then log "qpid: 127.0.0.1:$QPID_PORT is already taken by another process"; return 1; fi
  rm -rf "$QPID/work" && mkdir -p "$QPID/work" || return 1
  (QPID_WORK="$QPID/work" exec java -Xmx512m -Xms64m -cp "$QPID/libs/*" org.apache.qpid.server.Main \
    -icp "$QPID/config.json" -st Memory) >>"$STATE/qpid.log" 2>&1 &
  pid=$!
  record_pid qpid "$pid"
  if ! wait_port "$QPID_PORT" 90 "$pid"; then
    log "qpid did not open 127.0.0.1:$QPID_PORT (see $STATE/qpid.log)"; stop qpid; return 1
  fi
  log "qpid (Broker-J $QPID_VERSION) up on amqp://127.0.0.1:$QPID_PORT and amqp10://127.0.0.1:$QPID_PORT (pid $pid, $((SECONDS - t0)) s)"
}

status_line() { # status_line NAME PORT WHERE: "running" only when the process is ours and answers
  if ! running "$1"; then echo "$1: stopped"
  elif ! port_open "$2"; then echo "$1: not answering on 127.0.0.1:$2 (pid $(cat "$STATE/$1.pid"))"
  else echo "$1: running, $3 (pid $(cat "$STATE/$1.pid"))"; fi
}

stop() { # stop NAME
  local pidf="$STATE/$1.pid"
  if running "$1"; then
    local pid; pid=$(cat "$pidf")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do running "$1" || break; sleep 0.1; done
    if running "$1"; then kill -9 "$pid" 2>/dev/null || true; fi
    log "$1 stopped"
  fi
  rm -f "$pidf" "$STATE/$1.start"
}

# ephemeral_ports_note: says which of our ports an outgoing connection may take from under us.
ephemeral_ports_note() {
  local lo hi p clash=()
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
  for p in "$NATS_PORT" "$NATS_WS_PORT" "$REDIS_PORT" "$MQTT_PORT" "$MQTT_AUTH_PORT" "$MQTTS_PORT" "$AMQP_PORT" "$AMQP_DIST_PORT" \
    "$EPMD_PORT" "$RMQ_MQTT_PORT" "$RMQ_WS_MQTT_PORT" "$NGINX_PORT" "$NGINX_H2C_PORT" "$NGINX_TLS_PORT" "$ARTEMIS_PORT" "$ARTEMIS_TLS_PORT" "$ARTEMIS_MQTT_PORT" \
    "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_TLS_PORT" "$KAFKA_PROXIED_PORT" "$((KAFKA_PROXIED_PORT + 1))" \
    "$KAFKA_SASL_PORT" "$REDIS_TLS_PORT" "$QPID_PORT"; do
    if [ "$p" -ge "$lo" ] && [ "$p" -le "$hi" ]; then clash+=("$p"); fi
  done
  [ "${#clash[@]}" -eq 0 ] && return 0
  log "note: port(s) ${clash[*]} lie in the ephemeral range $lo-$hi (net.ipv4.ip_local_port_range);" \
    "an outgoing connection may hold one when its broker binds; choose ports below $lo"
}

# go_tool NAME VERSION PACKAGE OUT [BUILT]: builds the Go program PACKAGE@VERSION (its binary
# is called BUILT, by default NAME) once into OUT (optional: a failure, or no Go, is said and
# its test skipped).
go_tool() {
  local name=$1 version=$2 pkg=$3 out=$4 built=${5:-$1} log_file=$STATE/$1-build.log
  [ -x "$out" ] && return 0
  command -v go >/dev/null 2>&1 || { log "note: no Go: the $name $version test will be skipped"; return 0; }
  log "building $name $version with Go (once)"
  mkdir -p "$STATE/gobin"
  if GOBIN="$STATE/gobin" GOFLAGS=-mod=mod go install "$pkg@$version" >"$log_file" 2>&1 \
      && [ -x "$STATE/gobin/$built" ]; then
    mv "$STATE/gobin/$built" "$out"
  else
    log "note: could not build $name $version (see $log_file): its test will be skipped"
  fi
  return 0
}

# The current nats-server, h2spec (the HTTP/2 conformance tester) and Mochi MQTT.
NATS_CURRENT_VERSION=v2.15.2
NATS_CURRENT=$STATE/gobin/nats-server-$NATS_CURRENT_VERSION
H2SPEC_VERSION=v2.2.1+incompatible
H2SPEC=$STATE/gobin/h2spec-$H2SPEC_VERSION
MOCHI_VERSION=v2.7.9
MOCHI=$STATE/gobin/mochi-mqtt-$MOCHI_VERSION
go_tools() {
  go_tool nats-server "$NATS_CURRENT_VERSION" github.com/nats-io/nats-server/v2 "$NATS_CURRENT"
  go_tool h2spec "$H2SPEC_VERSION" github.com/summerwind/h2spec/cmd/h2spec "$H2SPEC"
  go_tool mochi-mqtt "$MOCHI_VERSION" github.com/mochi-mqtt/server/v2/cmd "$MOCHI" cmd
}

case "${1:-}" in
  up)
    if [ "${2:-}" = kafka ]; then kafka_up || { log "FAILED to start: kafka"; exit 1; }; exit 0; fi
    ephemeral_ports_note
    failed=()
    nats_up || failed+=(nats-server)
    redis_up || failed+=(redis-server)
    mosquitto_up || failed+=(mosquitto)
    rabbitmq_up || failed+=(rabbitmq)
    nginx_up || failed+=(nginx)
    artemis_up || failed+=(artemis)
    kafka_up || failed+=(kafka)
    qpid_up || failed+=(qpid)
    libzmq_up || failed+=(python3-zmq)
    peers_up || failed+=(third-party-clients)
    go_tools
    if [ "${#failed[@]}" -gt 0 ]; then log "FAILED to start: ${failed[*]}"; exit 1; fi ;;
  down)
    if [ "${2:-}" = kafka ]; then stop kafka; exit 0; fi
    stop nats; stop redis; stop mosquitto; rabbitmq_down; stop nginx; stop artemis; stop kafka; stop qpid ;;
  status)
    status_line nats "$NATS_PORT" "nats://127.0.0.1:$NATS_PORT"
    status_line redis "$REDIS_PORT" "redis://127.0.0.1:$REDIS_PORT, rediss://localhost:$REDIS_TLS_PORT"
    status_line mosquitto "$MQTT_PORT" "mqtt://127.0.0.1:$MQTT_PORT, mqtt://127.0.0.1:$MQTT_AUTH_PORT (auth), mqtts://localhost:$MQTTS_PORT"
    status_line rabbitmq "$AMQP_PORT" "amqp://127.0.0.1:$AMQP_PORT, node $RMQ_NODE"
    status_line nginx "$NGINX_PORT" "http://127.0.0.1:$NGINX_PORT/, h2c :$NGINX_H2C_PORT, https :$NGINX_TLS_PORT"
    status_line artemis "$ARTEMIS_PORT" "amqp10://127.0.0.1:$ARTEMIS_PORT, amqp10s://localhost:$ARTEMIS_TLS_PORT"
    status_line kafka "$KAFKA_PORT" "kafka://127.0.0.1:$KAFKA_PORT, kafka+ssl://localhost:$KAFKA_TLS_PORT"
    status_line qpid "$QPID_PORT" "amqp://127.0.0.1:$QPID_PORT, amqp10://127.0.0.1:$QPID_PORT (Broker-J)" ;;
  restart-rabbitmq) rabbitmq_restart "${2:-1}" ;;
  restart-artemis) artemis_restart "${2:-1}" ;;
  kill-restart) kill_restart "${2:?kill-restart NAME [SECONDS]}" "${3:-1}" ;;
  pause) pause "${2:?pause NAME SECONDS}" "${3:?pause NAME SECONDS}" ;;
  rabbitmqctl)
    shift
    # Without the node, rabbitmqctl would only start a stray epmd of its own.
    running rabbitmq || { log "rabbitmq is not running (scripts/brokers.sh up)"; exit 1; }
    rmqctl "$@" ;;
  env)
    echo "export MSGBENCH_IT_NATS_URL=nats://127.0.0.1:$NATS_PORT"
    echo "export MSGBENCH_IT_NATS_WS_URL=nats+ws://127.0.0.1:$NATS_WS_PORT"
    echo "export MSGBENCH_IT_REDIS_URL=redis://127.0.0.1:$REDIS_PORT"
    echo "export MSGBENCH_IT_REDIS_TLS_URL=rediss://localhost:$REDIS_TLS_PORT"
    echo "export MSGBENCH_IT_NATS_JS_URL=nats+js://127.0.0.1:$NATS_PORT"
    echo "export MSGBENCH_IT_MQTT_URL=mqtt://127.0.0.1:$MQTT_PORT"
    echo "export MSGBENCH_IT_MQTT_AUTH_URL=mqtt://$MQTT_USER:$MQTT_PASS@127.0.0.1:$MQTT_AUTH_PORT"
    echo "export MSGBENCH_IT_MQTTS_URL=mqtts://localhost:$MQTTS_PORT"
    echo "export MSGBENCH_IT_MQTT_CA=$(printf %q "$TLS/ca.pem")"
    echo "export MSGBENCH_IT_MQTT_CLIENT_CERT=$(printf %q "$TLS/client.pem")"
    echo "export MSGBENCH_IT_MQTT_CLIENT_KEY=$(printf %q "$TLS/client.key")"
    echo "export MSGBENCH_IT_AMQP_URL=amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f"
    echo "export MSGBENCH_IT_RMQ_MQTT_URL=mqtt://127.0.0.1:$RMQ_MQTT_PORT"
    echo "export MSGBENCH_IT_RMQ_WS_MQTT_URL=mqtt+ws://127.0.0.1:$RMQ_WS_MQTT_PORT/ws"
    echo "export MSGBENCH_IT_RMQ_AMQP10_URL=amqp10://guest:guest@127.0.0.1:$AMQP_PORT"
    echo "export MSGBENCH_IT_ARTEMIS_URL=amqp10://$ARTEMIS_USER:$ARTEMIS_PASS@127.0.0.1:$ARTEMIS_PORT"
    echo "export MSGBENCH_IT_ARTEMIS_TLS_URL=amqp10s://$ARTEMIS_USER:$ARTEMIS_PASS@localhost:$ARTEMIS_TLS_PORT"
    echo "export MSGBENCH_IT_ARTEMIS_WS_MQTT_URL=mqtt+ws://$ARTEMIS_USER:$ARTEMIS_PASS@127.0.0.1:$ARTEMIS_MQTT_PORT/mqtt"
    echo "export MSGBENCH_IT_ARTEMIS_CA=$(printf %q "$TLS/ca.pem")"
    echo "export MSGBENCH_IT_QPID_AMQP_URL=amqp://$ARTEMIS_USER:$ARTEMIS_PASS@127.0.0.1:$QPID_PORT/"
    echo "export MSGBENCH_IT_QPID_AMQP10_URL=amqp10://$ARTEMIS_USER:$ARTEMIS_PASS@127.0.0.1:$QPID_PORT"
    echo "export MSGBENCH_IT_KAFKA=kafka://127.0.0.1:$KAFKA_PORT"
    echo "export MSGBENCH_IT_KAFKA_TLS=kafka+ssl://localhost:$KAFKA_TLS_PORT"
    # Kafka's listener that advertises 127.0.0.1:PORT+1, where a test's fault proxy listens.
    echo "export MSGBENCH_IT_KAFKA_PROXIED=127.0.0.1:$KAFKA_PROXIED_PORT"
    echo "export MSGBENCH_IT_KAFKA_SASL=127.0.0.1:$KAFKA_SASL_PORT"
    echo "export MSGBENCH_IT_CA=$(printf %q "$TLS/ca.pem")"
    echo "export MSGBENCH_IT_HTTP_URL=http://127.0.0.1:$NGINX_PORT/"
    echo "export MSGBENCH_IT_HTTP_H2C_URL=http://127.0.0.1:$NGINX_H2C_PORT/"
    echo "export MSGBENCH_IT_HTTPS_URL=https://127.0.0.1:$NGINX_TLS_PORT/"
    echo "export MSGBENCH_IT_HTTPS_CA=$(printf %q "$TLS/ca.pem")"
    if libzmq_python_ok; then echo "export MSGBENCH_IT_LIBZMQ_PYTHON=$SYS_PYTHON"; fi
    if peer_python_ok; then echo "export MSGBENCH_IT_PEER_PYTHON=$SYS_PYTHON"; fi
    if [ -x "$NATS_CURRENT" ]; then echo "export MSGBENCH_IT_NATS_SERVER_CURRENT=$(printf %q "$NATS_CURRENT")"; fi
    if [ -x "$H2SPEC" ]; then echo "export MSGBENCH_IT_H2SPEC=$(printf %q "$H2SPEC")"; fi
    if [ -x "$MOCHI" ]; then echo "export MSGBENCH_IT_MOCHI_MQTT=$(printf %q "$MOCHI")"; fi ;;
  *) echo "usage: $0 up [kafka]|down [kafka]|status|env|restart-rabbitmq [SECONDS]|restart-artemis [SECONDS]|kill-restart NAME [SECONDS]|pause NAME SECONDS|rabbitmqctl ARGS..." >&2; exit 2 ;;
esac
