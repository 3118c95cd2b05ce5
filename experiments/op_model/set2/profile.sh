#!/usr/bin/env bash
# GPU (the H200 device machine; .whl carried). Session 28's diagnosis of the second held-out
# set's largest misses, after its blind comparison: one discarded measure process, then
# vdnnsim profile (NOTE [module timing]) of MobileNet V1 (128) in fp32 and autocast-bf16 and
# Tiny StarCoder (8 x 512) in autocast-bf16, AdamW, into OUT/profiles.tgz.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SET=experiments/op_model/set2
. "$ROOT/experiments/op_model/device_check.sh"
H=$ROOT/experiments/op_model/set2
P=$OUT/profiles
mkdir -p "$P"
python3 -m vdnnsim measure --model hf:$H/albert-base.yaml -b 8 --seq-len 128 --json > "$P/warmup.json" 2>/dev/null
for spec in "mobilenet-v1 128 fp32" "mobilenet-v1 128 autocast-bf16" "starcoder-tiny 8 autocast-bf16 --seq-len 512"; do
  set -- $spec
  m=$1 b=$2 dt=$3
  shift 3
  t0=$(date +%s)
  python3 -m vdnnsim profile --model hf:$H/$m.yaml -b $b --dtype $dt --optimizer adamw "$@" \
    --no-check -o "$P/$m-$dt.yaml.gz" > "$P/$m-$dt.log" 2>&1
  echo "$m $dt rc $? $(( $(date +%s) - t0 )) s"
done
tar czf "$OUT/profiles.tgz" -C "$OUT" profiles
rm -rf "$P"
