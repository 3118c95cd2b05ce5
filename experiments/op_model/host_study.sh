#!/usr/bin/env bash
# GPU (any lent machine; .whl carried). Session 29's host study (NOTE [host mixes]): on one
# machine, the host-only op calibration with its mixed chains (vdnnsim calibrate --ops
# --host-only), then host_gap.py over runs whose host time the op model missed on the
# H200 (and two it matched), then the host-only calibration again; one discarded process
# first. The host's costs are compared with each other on the same machine, so any lent
# GPU serves (an H200 was not to be had). OUT/host_study.tgz is remade after every step.
#   bash experiments/op_model/host_study.sh OUT
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
nvidia-smi --query-gpu=name --format=csv,noheader
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$ROOT"/.whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1
D=/tmp/s29work/host_study
rm -rf "$D"; mkdir -p "$D"
pack() { tar czf "$OUT/host_study.tgz.part" -C /tmp/s29work host_study && mv "$OUT/host_study.tgz.part" "$OUT/host_study.tgz"; }
G="python3 $ROOT/experiments/op_model/host_gap.py"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$D/gpu.txt"
lscpu > "$D/lscpu.txt" 2>&1
t0=$(date +%s)
$G set1 distilbert-base 32 autocast-bf16 256 > "$D/warmup.json" 2> "$D/warmup.err"
echo "warmup $(( $(date +%s) - t0 )) s"
python3 -m vdnnsim calibrate --ops --host-only -o "$D/host_1.json" 2> "$D/host_1.log"
echo "host_1 rc $? $(( $(date +%s) - t0 )) s"; pack
while read -r s m b dt q o; do
  f=$(echo "$m" | tr ':' '_')-$dt
  $G $s $m $b $dt $q $o > "$D/$f.json" 2> "$D/$f.err"
  echo "$m $dt rc $? $(( $(date +%s) - t0 )) s"; pack
done <<'RUNS'
set2 albert-base 32 autocast-bf16 256
- torchvision:regnet_y_400mf 64 fp32 - sgd
set2 starcoder-tiny 8 autocast-bf16 512
set1 electra-base 32 autocast-bf16 256
set1 qwen3-0.6b 8 autocast-bf16 512
- torchvision:shufflenet_v2_x0_5 64 fp32 - sgd
set1 dinov2-small 64 autocast-bf16
set1 distilbert-base 32 autocast-bf16 256
RUNS
python3 -m vdnnsim calibrate --ops --host-only -o "$D/host_2.json" 2> "$D/host_2.log"
echo "host_2 rc $? $(( $(date +%s) - t0 )) s"; pack
