#!/usr/bin/env bash
# Runs one segmented benchmark on the current kubectl context:
#   deploy/kubernetes/run.sh [RUN_NAME] [LEAD_SECONDS]
# Applies the scenario and the results volume, starts the Indexed Job with a start time
# LEAD_SECONDS (default 60: time to pull the image and connect) from now, waits for every
# segment, then runs the merge job and prints the merged report.
set -euo pipefail
cd "$(dirname "$0")"
run=${1:-run-$(date -u +%Y%m%d-%H%M%S)}
lead=${2:-60}
start=$(date -u -d "@$(( $(date +%s) + lead ))" +%Y-%m-%dT%H:%M:%SZ)
kubectl apply -f scenario-configmap.yaml -f results-pvc.yaml
kubectl delete job msgbench-segments msgbench-merge --ignore-not-found
sed -e "s/2026-11-22T10:00:00Z/$start/" -e "s/\"run-1\"/\"$run\"/" segments-job.yaml | kubectl apply -f -
echo "run $run: segments start at $start"
kubectl wait --for=condition=complete --timeout=24h job/msgbench-segments
sed -e "s/\"run-1\"/\"$run\"/" merge-job.yaml | kubectl apply -f -
kubectl wait --for=condition=complete --timeout=1h job/msgbench-merge
kubectl logs job/msgbench-merge
