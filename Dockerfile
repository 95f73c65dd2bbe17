# The msgbench image used by deploy/kubernetes/ (one segment per pod, and the merge job).
#   docker build -t msgbench:latest .
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The Kafka driver links the system librdkafka (dynamically).
RUN apt-get update \
 && apt-get install -y --no-install-recommends librdkafka-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked --bin msgbench \
 && cp target/release/msgbench /msgbench

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates librdkafka1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /msgbench /usr/local/bin/msgbench
# Many connections per generator: the pod's file limit comes from the container runtime;
# msgbench raises its soft limit to the hard limit itself and says when that is too low.
USER 65532:65532
ENTRYPOINT ["msgbench"]
CMD ["--help"]
