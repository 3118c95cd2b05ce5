#!/usr/bin/env bash
# GPU (the H200 device machine; .whl carried). Session 28's second batch, one call:
#   bash experiments/op_model/set3/device.sh OUT
# the norms grid of the op calibration (vdnnsim calibrate --ops --classes norms --scale 0.6,
# bf16 and fp32), then the third held-out set's runs, one CNN and one transformer first;
# OUT/set3.tgz is remade after every step, so a call cut short by its time still brings
# back what it finished.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SET=experiments/op_model/set3
. "$ROOT/experiments/op_model/device_check.sh"
D=/tmp/s28work/set3  # outside OUT: only the packed file comes back (at most 8 files do)
rm -rf "$D"
mkdir -p "$D/cal"
pack() { tar czf "$OUT/set3.tgz.part" -C /tmp/s28work set3 && mv "$OUT/set3.tgz.part" "$OUT/set3.tgz"; }
$C "$D" warmup
t0=$(date +%s)
for dt in bf16 fp32; do
  python3 -m vdnnsim calibrate --ops --classes norms --scale 0.6 --dtype $dt \
    -o "$D/cal/h200_ops_norms_$dt.json" 2> "$D/cal/norms_$dt.log"
  echo "norms $dt rc $? $(( $(date +%s) - t0 )) s"
  pack
done
for run in hgnetv2-fp32 mobilebert-bf16 hgnetv2-bf16 mobilebert-fp32 neo-fp32 neo-bf16; do
  $C "$D" measure "$run"
  pack
done
rm -rf "$D"
