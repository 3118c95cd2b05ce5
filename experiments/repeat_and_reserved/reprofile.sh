#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28: traces/h200_torchvision's and traces/h200_torchvision_heldout's traces
# profiled again with today's profiler, which records each convolution's backward
# workspaces one by one (NOTE [backward workspaces]) and its kernel counts; the step-1
# replay of NOTE [cublas workspaces] needs them. One discarded process first (the first
# process on a fresh machine runs ~30% slow, docs/validation.md), then one fresh
# `vdnnsim profile` process per trace, one after another:
#   bash experiments/repeat_and_reserved/reprofile.sh OUT [WHEELS]
# Writes OUT/NAME_bN.yaml, OUT/profile_log.txt (each command's last line and seconds).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: reprofile.sh OUT [WHEELS]}
WHEELS=${2:-$ROOT/.whl}
mkdir -p "$OUT"
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
python3 -m vdnnsim measure --model torchvision:resnet50 --batch 64 --json > "$OUT/warmup.json" \
  2> /dev/null
for run in vgg16:64 vgg16:128 vgg16:256 resnet50:64 resnet50:128 resnet50:256 \
           densenet121:32 densenet121:64 densenet121:128 \
           mobilenet_v2:64 mobilenet_v2:128 mobilenet_v2:256 \
           efficientnet_b0:32 efficientnet_b0:64 efficientnet_b0:128 \
           convnext_tiny:32 convnext_tiny:64 convnext_tiny:128 \
           shufflenet_v2_x1_0:64 shufflenet_v2_x1_0:128 shufflenet_v2_x1_0:256 \
           regnet_y_800mf:32 regnet_y_800mf:64 regnet_y_800mf:128 \
           wide_resnet50_2:32 wide_resnet50_2:64 wide_resnet50_2:128; do
  name=${run%%:*}; b=${run##*:}
  t0=$(date +%s.%N)
  python3 -m vdnnsim profile --model "torchvision:$name" --batch "$b" --trials 5 \
    -o "$OUT/${name}_b$b.yaml" > "$OUT/p.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "[$(date +%T)] rc=$rc $(tail -1 "$OUT/p.log") ($(python3 -c "print(f'{$t1-$t0:.1f}s')"))" \
    >> "$OUT/profile_log.txt"
done
rm -f "$OUT/p.log"
