#!/usr/bin/env bash
# Every GPU measurement of issue 56 (tensor-granular vDNN), for one device call or several:
#   bash experiments/tensor_plans/device.sh OUT SECONDS [CASE ...]
# 1. the tensor runtime's GPU test (gradients bit-identical to plain training, the forward
#    pass ending lighter by the offloaded bytes): OUT/gpu_test.txt;
# 2. bench/bench_tensor_runtime.py (the step against the PCIe bound of its copies):
#    OUT/bench_tensor_runtime.txt;
# 3. gpu_runs.sh OUT (what is left of SECONDS) CASE ...: the held-out plans and PyTorch's
#    options, OUT/runs.jsonl and OUT/log.txt.
# Resumable: a step done on this machine (its marker under /tmp/vdnnsim_device) or whose
# result is in the repository (traces/h200_tensor_plans/, copied back) is skipped.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: device.sh OUT SECONDS [CASE ...]}
END=$(( $(date +%s) + ${2:?usage: device.sh OUT SECONDS [CASE ...]} ))
shift 2
mkdir -p "$OUT" /tmp/vdnnsim_device
cd "$ROOT" || exit 2
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$ROOT/experiments/repeat_and_reserved/device_env.sh"
card=$(python3 -c "import torch; print(torch.cuda.get_device_name(0).split()[1].lower())")
KEPT=$ROOT/traces/h200_tensor_plans
if [ ! -e /tmp/vdnnsim_device/test ] && [ ! -e "$KEPT/gpu_test_${card}_passed.txt" ]; then
  python3 -m pytest -p no:cacheprovider -x -q tests/test_tensor_runtime.py \
    -k on_a_gpu > "$OUT/gpu_test.txt" 2>&1
  echo "rc=$?" >> "$OUT/gpu_test.txt"
  touch /tmp/vdnnsim_device/test
fi
if [ ! -e /tmp/vdnnsim_device/bench ] && [ ! -e "$KEPT/bench_tensor_runtime_${card}.txt" ]; then
  python3 bench/bench_tensor_runtime.py > "$OUT/bench_tensor_runtime.txt" 2>&1
  echo "rc=$?" >> "$OUT/bench_tensor_runtime.txt"
  touch /tmp/vdnnsim_device/bench
fi
left=$(( END - $(date +%s) ))
[ "$left" -gt 0 ] && bash "$HERE/gpu_runs.sh" "$OUT" "$left" "$@"
exit 0
