#!/usr/bin/env bash
# OASiS live as a new user runs it, on 2 nodes x 2 GPUs with 5 s slots (`--policy-opt slot_s=5`):
#   a) five 2-GPU jobs with no --est-s, no deadline, no priority (examples/mlp.py, 60 steps of
#      0.1 s): how many are admitted, rejected (and why), how many attempts each took;
#   b) six 2-GPU jobs of about 40 s that declare it (--est-s 40; 200 steps of 0.2 s): the stop
#      cycles (checkpoints the policy asked for), the attempts per job and which were done by 600 s.
# Prints one line per job and the time until all ended.
# Usage: benchmarks/oasis_live_usable.sh [PORT]   (a data dir of its own under /tmp, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
port=${1:-18766}
run() {  # $1: scenario name, $2: jobs, rest: submit options
    local name=$1 n=$2; shift 2
    local dir; dir=$(mktemp -d /tmp/stint-oasis-live.XXXXXX)
    export STINT_DATA_DIR=$dir/data STINT_SERVER=http://127.0.0.1:$port
    .venv/bin/stint serve --data-dir "$dir/data" --port "$port" --nodes 2 --gpus-per-node 2 \
        --policy oasis --policy-opt slot_s=5 >"$dir/serve.log" 2>&1 &
    local pid=$!
    until .venv/bin/stint nodes >/dev/null 2>&1; do sleep 1; done
    local t0; t0=$(date +%s)
    for _ in $(seq "$n"); do .venv/bin/stint submit --gpus 2 --min-gpus 1 --max-gpus 2 "$@" >/dev/null; done
    local limit=$((t0 + 600))
    while [ "$(date +%s)" -lt $limit ] && .venv/bin/stint jobs --json | .venv/bin/python -c 'import json, sys
sys.exit(0 if any(j["state"] not in ("succeeded", "failed", "rejected", "cancelled") for j in json.load(sys.stdin)) else 1)'
    do sleep 2; done
    echo "$name: all ended (or 600 s passed) after $(( $(date +%s) - t0 )) s"
    N=$n .venv/bin/python - <<'PY'
import json, os, subprocess
for job in range(1, int(os.environ["N"]) + 1):
    j = json.loads(subprocess.run([".venv/bin/stint", "show", str(job), "--json"], check=True,
                                  capture_output=True, text=True).stdout)
    stops = sum(1 for t in j["transitions"] if t["dst"] == "checkpointing")
    extra = f", reason: {j['reason']}" if j["state"] == "rejected" else ""
    print(f"  job {job}: {j['state']}, {j['attempt']} attempt(s), {stops} stop(s){extra}")
PY
    kill $pid; wait $pid 2>/dev/null || true
    rm -rf "$dir"
}
run "a) no --est-s" 5 -- .venv/bin/python examples/mlp.py --steps 60 --sleep 0.1
run "b) --est-s 40" 6 --est-s 40 -- .venv/bin/python examples/mlp.py --steps 200 --sleep 0.2
