#!/usr/bin/env bash
# Checks deploy/kubernetes/ without a cluster:
# - every manifest against the Kubernetes schemas (kubernetes-validate, strict: unknown fields
#   are errors), installed into a virtualenv under ~/.cache on first use;
# - the scenario in the ConfigMap with `msgbench validate`;
# - the Indexed Job's wiring: completions = parallelism = the N of --segment auto/N, and the
#   merge job reads the files the segments write.
#   scripts/check-deploy.sh [path/to/msgbench]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/msgbench-target}/debug/msgbench}
venv=${MSGBENCH_VENV:-$HOME/.cache/msgbench-venv}
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  echo "check-deploy: installing kubernetes-validate into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate
fi
"$venv/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" - "$tmp" <<'PY'
import re, sys, yaml
out = sys.argv[1]
docs = {}
for f in ["scenario-configmap.yaml", "segments-job.yaml", "merge-job.yaml"]:
    with open(f"deploy/kubernetes/{f}") as fh:
        docs[f] = yaml.safe_load(fh)
with open(f"{out}/scenario.toml", "w") as fh:
    fh.write(docs["scenario-configmap.yaml"]["data"]["scenario.toml"])
job = docs["segments-job.yaml"]["spec"]
assert job["completionMode"] == "Indexed", "the segments job must be an Indexed Job"
args = " ".join(job["template"]["spec"]["containers"][0]["args"])
m = re.search(r"--segment auto/(\d+)", args)
assert m, "the segments job must run --segment auto/N"
n = int(m.group(1))
assert job["completions"] == n and job["parallelism"] == n, \
    f"completions ({job['completions']}) and parallelism ({job['parallelism']}) must equal N = {n}"
assert "--start-at" in args, "segments must share a start time (--start-at)"
assert "seg-$JOB_COMPLETION_INDEX.jsonl" in args, "each segment writes its own file"
merge = " ".join(docs["merge-job.yaml"]["spec"]["template"]["spec"]["containers"][0]["args"])
assert "msgbench merge /results/$RUN/seg-*.jsonl" in merge, "the merge job must read the segment files"
print(f"check-deploy: Indexed Job of {n} segments, merge job wired")
PY
"$bin" validate "$tmp/scenario.toml"
