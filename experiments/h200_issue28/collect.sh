#!/usr/bin/env bash
# GPU (the H200 device machine; simpy and pydantic importable, docs/gpu.md). Issue 28's
# runs (traces/h200_issue28/README.md), by stage, appending to DIR:
#   bash experiments/h200_issue28/collect.sh DIR warmup     one discarded measure process
#   bash experiments/h200_issue28/collect.sh DIR snap       traces/h200's worst reserved runs
#                                                           with the allocator's history
#   bash experiments/h200_issue28/collect.sh DIR time R     round R of the held-out runs:
#                                                           each model, each allocator, a
#                                                           fresh process -> DIR/time.jsonl
#   bash experiments/h200_issue28/collect.sh DIR caps       capped runs at the median reserved
#                                                           of the rounds +-3% -> DIR/caps.jsonl
#   bash experiments/h200_issue28/collect.sh DIR profile    vdnnsim profile of each model
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
H="$ROOT/experiments/h200_issue28"
DIR=$1
WHAT=$2
mkdir -p "$DIR/snap" "$DIR/profile"
EXP=expandable_segments:True
# model -> vdnnsim measure/profile arguments (the README's table)
spec() {
  case $1 in
    qwen2-0.5b) echo "--model hf:$H/qwen2-0.5b.yaml -b 8 --seq-len 512 --dtype autocast-bf16 --optimizer adamw" ;;
    pythia-410m) echo "--model hf:$H/pythia-410m.yaml -b 8 --seq-len 512 --dtype fp32 --optimizer adamw" ;;
    convnext-tiny) echo "--model hf:$H/convnext-tiny.yaml -b 64 --dtype fp32 --optimizer sgd" ;;
  esac
}
MODELS="qwen2-0.5b pythia-410m convnext-tiny"
# one JSON line: the record of a process with what it was, or its error's tail
line() {  # FILE ERR key=value ...
  python3 - "$@" <<'PY'
import json, sys
out, err, *kv = sys.argv[1:]
try:
    rec = json.loads(open(out).read())
except Exception:
    rec = {"error": open(err).read()[-600:]}
for item in kv:
    k, _, v = item.partition("=")
    rec[k] = int(v) if v.isdigit() else v
print(json.dumps(rec))
PY
}
case $WHAT in
  warmup)
    python3 -m vdnnsim measure --model torchvision:resnet50 -b 64 --json > "$DIR/warmup.json" 2> "$DIR/warmup.err" ;;
  snap)
    i=0
    while read -r name alloc args; do
      [ -z "$name" ] && continue
      conf=""; [ "$alloc" = expandable ] && conf=$EXP
      # shellcheck disable=SC2086
      (PYTORCH_CUDA_ALLOC_CONF=$conf python3 "$H/snapshot.py" "$DIR/snap/$name.pickle" -- $args \
         > "$DIR/snap/$name.json" 2> "$DIR/snap/$name.err") &
      i=$((i + 1)); [ $((i % 3)) -eq 0 ] && wait
    done <<'RUNS'
vgg16_b64_baseline default --model torchvision:vgg16 -b 64
vgg16_b64_vdnn_conv default --model torchvision:vgg16 -b 64 --policy vdnn_conv
vgg16_b128_vdnn_conv default --model torchvision:vgg16 -b 128 --policy vdnn_conv
resnet50_b64_baseline default --model torchvision:resnet50 -b 64
resnet50_b64_vdnn_conv default --model torchvision:resnet50 -b 64 --policy vdnn_conv
densenet121_b128_vdnn_conv default --model torchvision:densenet121 -b 128 --policy vdnn_conv
mobilenet_v2_b64_vdnn_all default --model torchvision:mobilenet_v2 -b 64 --policy vdnn_all
densenet121_b32_vdnn_all default --model torchvision:densenet121 -b 32 --policy vdnn_all
vgg16_b64_baseline_exp expandable --model torchvision:vgg16 -b 64
resnet50_b64_vdnn_conv_exp expandable --model torchvision:resnet50 -b 64 --policy vdnn_conv
densenet121_b128_vdnn_conv_exp expandable --model torchvision:densenet121 -b 128 --policy vdnn_conv
mobilenet_v2_b64_vdnn_all_exp expandable --model torchvision:mobilenet_v2 -b 64 --policy vdnn_all
RUNS
    wait ;;
  time)
    R=$3
    for m in $MODELS; do
      for alloc in default expandable; do
        conf=""; [ $alloc = expandable ] && conf=$EXP
        # shellcheck disable=SC2046
        PYTORCH_CUDA_ALLOC_CONF=$conf python3 -m vdnnsim measure $(spec $m) --json > "$DIR/m.json" 2> "$DIR/m.err"
        line "$DIR/m.json" "$DIR/m.err" name=$m round=$R allocator_conf=$conf >> "$DIR/time.jsonl"
      done
    done ;;
  caps)
    i=0
    for m in $MODELS; do
      for f in 0.97 1.03; do
        cap=$(python3 - "$DIR/time.jsonl" "$m" "$f" <<'PY'
import json, statistics, sys
recs = [json.loads(x) for x in open(sys.argv[1])]
r = [x["peak_reserved_bytes"] for x in recs if x.get("name") == sys.argv[2]
     and not x.get("allocator_conf") and x.get("fits")]
print(int(statistics.median(r) * float(sys.argv[3])) if r else "")
PY
)
        [ -z "$cap" ] && continue
        # shellcheck disable=SC2046
        (python3 -m vdnnsim measure $(spec $m) --memory-cap "$cap" --json > "$DIR/c_${m}_$f.json" 2> "$DIR/c_${m}_$f.err";
         line "$DIR/c_${m}_$f.json" "$DIR/c_${m}_$f.err" name=$m factor=$f >> "$DIR/caps.jsonl") &
        i=$((i + 1)); [ $((i % 3)) -eq 0 ] && wait
      done
    done
    wait ;;
  profile)
    for m in $MODELS; do
      # shellcheck disable=SC2046
      python3 -m vdnnsim profile $(spec $m) --no-check -o "$DIR/profile/$m.yaml.gz" > "$DIR/profile/$m.log" 2>&1
      echo "$m rc=$?" >> "$DIR/profile/profile.txt"
    done ;;
esac
