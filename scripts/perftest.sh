#!/usr/bin/env bash
# Runs RabbitMQ's PerfTest (Java, com.rabbitmq:perf-test), the reference AMQP 0-9-1 load tool:
# a yardstick for msgbench's own figures against the RabbitMQ of scripts/brokers.sh.
#
#   scripts/perftest.sh [perf-test args...]     e.g. 1 producer, 1 consumer, 1 KB messages,
#     publisher confirms (window 100), 10 s:
#     scripts/perftest.sh --uri amqp://guest:guest@127.0.0.1:20672/%2f -x 1 -y 1 -s 1000 --confirm 100 -z 10
#   scripts/perftest.sh --help
#
# Maven Central has only PerfTest's plain jar (its executable uber jar is not published there),
# so on first use Maven copies that jar and its runtime dependencies into
# ${MSGBENCH_TOOLS_DIR:-$HOME/.cache/msgbench-tools}/perf-test-VERSION/; later runs reuse them.
# MSGBENCH_PERFTEST_VERSION picks the version (default 2.22.1, the newest release there when this
# was written). JAVA_OPTS go to the JVM. When /usr/bin/time exists (Debian package 'time'), the
# PerfTest process's CPU time, wall time and peak memory are printed on stderr at the end.
set -euo pipefail

VERSION=${MSGBENCH_PERFTEST_VERSION:-2.22.1}
TOOLS=${MSGBENCH_TOOLS_DIR:-$HOME/.cache/msgbench-tools}
DIR=$TOOLS/perf-test-$VERSION

die() { echo "perftest: $*" >&2; exit 1; }

fetch() { # the jar and its runtime dependencies into $DIR, via a throwaway pom
  command -v mvn >/dev/null 2>&1 || die "mvn is missing: install Maven (Debian package 'maven')"
  mkdir -p "$TOOLS"
  local tmp; tmp=$(mktemp -d "$TOOLS/.perf-test-XXXXXX")
  cat >"$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>msgbench</groupId>
  <artifactId>perf-test-fetch</artifactId>
  <version>0</version>
  <dependencies>
    <dependency>
      <groupId>com.rabbitmq</groupId>
      <artifactId>perf-test</artifactId>
      <version>$VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
  echo "perftest: fetching com.rabbitmq:perf-test:$VERSION and its dependencies into $DIR" >&2
  if ! mvn -B -q -f "$tmp/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tmp/lib" >"$tmp/mvn.log" 2>&1; then
    cat "$tmp/mvn.log" >&2; rm -rf "$tmp"; die "Maven could not fetch com.rabbitmq:perf-test:$VERSION"
  fi
  [ -f "$tmp/lib/perf-test-$VERSION.jar" ] || { rm -rf "$tmp"; die "perf-test-$VERSION.jar is missing after the fetch"; }
  rm -rf "$DIR" && mv "$tmp/lib" "$DIR" && touch "$DIR/.complete" && rm -rf "$tmp"
}

command -v java >/dev/null 2>&1 || die "java is missing: install a Java 11+ runtime (Debian package 'default-jre-headless')"
[ -f "$DIR/.complete" ] || fetch

read -ra java_opts <<<"${JAVA_OPTS:-}"
cmd=(java "${java_opts[@]}" -cp "$DIR/*" com.rabbitmq.perf.PerfTest "$@")
if [ -x /usr/bin/time ]; then
  exec /usr/bin/time -f "perftest: CPU %U s user + %S s system, %e s elapsed, max RSS %M KB" "${cmd[@]}"
fi
exec "${cmd[@]}"
