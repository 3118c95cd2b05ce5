#!/usr/bin/env bash
# GPU (the H200 device machine; .whl carried, docs/gpu.md). Session 28's calls, in order, on
# one warm machine: bash experiments/op_model/set2/device.sh OUT CALL
#   CALL cal:  the CNN classes of the op calibration (vdnnsim calibrate --ops --classes cnn,
#              bf16 and fp32, scale 0.6) and two host-only processes, then the CNN runs
#   CALL text: the four text models' runs but OLMo 2's;   CALL olmo: OLMo 2's runs
# Each call refuses a GPU that is not an H200 (the calibration and the set are the H200's)
# and runs one discarded measure process first on a machine that has not had one.
set -u
OUT=$1
CALL=$2
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SET=experiments/op_model/set2
. "$ROOT/experiments/op_model/device_check.sh"
mkdir -p "$OUT/set2" "$OUT/cal"
if [ ! -e /tmp/vdnnsim_warm ]; then
  $C "$OUT/set2" warmup && touch /tmp/vdnnsim_warm
else
  echo "machine warm: no discarded process"
fi
t0=$(date +%s)
case $CALL in
  cal)
    for dt in bf16 fp32; do
      python3 -m vdnnsim calibrate --ops --classes cnn --scale 0.6 --dtype $dt \
        -o "$OUT/cal/h200_ops_cnn_$dt.json" 2> "$OUT/cal/cnn_$dt.log"
      echo "cnn $dt rc $? $(( $(date +%s) - t0 )) s"
    done
    for p in 1 2; do
      python3 -m vdnnsim calibrate --ops --host-only -o "$OUT/cal/h200_ops_host_s28p$p.json"
      echo "host $p rc $? $(( $(date +%s) - t0 )) s"
    done
    $C "$OUT/set2" measure "bit50-fp32 bit50-bf16 mobilenet-fp32 mobilenet-bf16" ;;
  text)
    $C "$OUT/set2" measure "starcoder-fp32 starcoder-bf16 albert-fp32 albert-bf16 modernbert-fp32 modernbert-bf16" ;;
  olmo)
    $C "$OUT/set2" measure "olmo2-fp32 olmo2-bf16" ;;
esac
git -C "$ROOT" rev-parse HEAD > "$OUT/set2/commit.txt" 2>/dev/null
tar czf "$OUT/set2_$CALL.tgz" -C "$OUT" set2 cal
