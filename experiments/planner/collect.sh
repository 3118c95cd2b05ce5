#!/usr/bin/env bash
# On the H200 (device machine), with simpy/pydantic importable (OUT relative to the working
# directory; the plans are read from traces/h200_planner_12gib/, which keeps the records):
#   bash experiments/planner/collect.sh OUT [greedy|milp|all]
# Each run in a fresh process: the uncapped baselines, then each plan under a 12 GiB cap:
# the greedy search's plans (*_b256_12GiB.plan.yaml -> *_planned.json) and the MILP's
# (*_b256_12GiB.milp.yaml -> *_milp.json; vdnnsim plan --method milp). The
# *.milp-noheadroom.yaml plans (MILP plans made before NOTE [autotune headroom]) were measured
# the same way into *_milp_noheadroom.json; vgg16's also under --memory-cap-gb 20.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)  # the repository: its vdnnsim, its traces/
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT=$1
WHICH=${2:-all}
for m in vgg16 resnet50; do
  if [ "$WHICH" = all ] || [ "$WHICH" = greedy ]; then
    python3 -m vdnnsim measure --model torchvision:$m --batch 256 --json > $OUT/${m}_baseline.json 2>$OUT/${m}_baseline.err
    python3 -m vdnnsim measure --model torchvision:$m --batch 256 --memory-cap-gb 12 \
      --plan "$ROOT"/traces/h200_planner_12gib/${m}_b256_12GiB.plan.yaml --json > $OUT/${m}_planned.json 2>$OUT/${m}_planned.err
  fi
  if [ "$WHICH" = all ] || [ "$WHICH" = milp ]; then
    python3 -m vdnnsim measure --model torchvision:$m --batch 256 --memory-cap-gb 12 \
      --plan "$ROOT"/traces/h200_planner_12gib/${m}_b256_12GiB.milp.yaml --json > $OUT/${m}_milp.json 2>$OUT/${m}_milp.err
  fi
done
