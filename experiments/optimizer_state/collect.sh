#!/usr/bin/env bash
# NOTE [optimizer state], checked on the H200 (device machine, any folder, simpy and
# pydantic importable): the models of traces/h200_torchvision at one committed batch size each, SGD and
# AdamW, each run a fresh process; records OUT/<model>_b<batch>_<optimizer>.json.
#   bash experiments/optimizer_state/collect.sh OUT      (the records: traces/h200_sgd_adamw/)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)  # the repository: its vdnnsim, its traces/
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT=$1
for mb in resnet50:128 vgg16:64 mobilenet_v2:128 densenet121:64; do
  m=${mb%%:*}; b=${mb##*:}
  for o in sgd adamw; do
    python3 -m vdnnsim measure --model torchvision:$m --batch $b --optimizer $o --json \
      > $OUT/${m}_b${b}_$o.json 2>>$OUT/errors.log
  done
done
