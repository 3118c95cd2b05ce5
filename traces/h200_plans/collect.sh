#!/usr/bin/env bash
# On the H200 (device machine), from the repository root, with simpy/pydantic importable:
#   bash traces/h200_plans/collect.sh OUT
# Each run in a fresh process: the uncapped baselines, then each plan under a 12 GiB cap.
set -u
OUT=$1
for m in vgg16 resnet50; do
  python3 -m vdnnsim measure --model torchvision:$m --batch 256 --json > $OUT/${m}_baseline.json 2>$OUT/${m}_baseline.err
  python3 -m vdnnsim measure --model torchvision:$m --batch 256 --memory-cap-gb 12 \
    --plan traces/h200_plans/${m}_b256_12GiB.plan.yaml --json > $OUT/${m}_planned.json 2>$OUT/${m}_planned.err
done
