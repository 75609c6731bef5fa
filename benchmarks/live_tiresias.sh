#!/usr/bin/env bash
# Tiresias live, as a new user would run it: 1 node x 2 GPUs, a 20 GPU-second threshold, three
# 2-GPU SDK jobs of about a minute each (examples/mlp.py, 300 steps of 0.2 s). Prints each job's
# demotion-driven preemptions and the time until all three finished.
# Usage: benchmarks/live_tiresias.sh [PORT]   (a data dir of its own under /tmp, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
port=${1:-18765}
dir=$(mktemp -d /tmp/stint-live-tiresias.XXXXXX)
export STINT_DATA_DIR=$dir/data STINT_SERVER=http://127.0.0.1:$port
.venv/bin/stint serve --data-dir "$dir/data" --port "$port" --nodes 1 --gpus-per-node 2 \
    --policy tiresias --policy-opt thresholds_gpu_s=20 >"$dir/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
until .venv/bin/stint nodes >/dev/null 2>&1; do sleep 1; done
t0=$(date +%s)
for _ in 1 2 3; do
    .venv/bin/stint submit --gpus 2 -- .venv/bin/python examples/mlp.py --steps 300 --sleep 0.2 >/dev/null
done
while .venv/bin/stint jobs --json | python3 -c 'import json, sys
sys.exit(0 if any(j["state"] not in ("succeeded", "failed") for j in json.load(sys.stdin)) else 1)'
do sleep 5; done
echo "all ended after $(( $(date +%s) - t0 )) s"
.venv/bin/python - <<'PY'
import json, os, subprocess
for job in (1, 2, 3):
    j = json.loads(subprocess.run([".venv/bin/stint", "show", str(job), "--json"], check=True,
                                  capture_output=True, text=True).stdout)
    demoted = sum(1 for t in j["transitions"] if "tiresias: preempt" in t["reason"])
    print(f"job {job}: {j['state']}, {demoted} demotion-driven preemption(s), "
          f"attained {j['attained_gpu_s']:.0f} GPU-s")
PY
