#!/usr/bin/env bash
# Set up (if needed) and run the main job: the simulator comparing the baseline policies on the
# shipped Philly trace, on a 512-GPU cluster. Results land in results/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/stint sim --trace philly --policy fifo,srtf,drf,tiresias --gpus 512 --out results/ --plots "$@"
