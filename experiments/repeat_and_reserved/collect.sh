#!/usr/bin/env bash
# GPU (the H200 device machine; simpy and pydantic importable, docs/gpu.md). Issue 28's
# runs (traces/h200_reserved_heldout/README.md), by stage, appending to DIR:
#   bash experiments/repeat_and_reserved/collect.sh DIR warmup     one discarded measure process
#   bash experiments/repeat_and_reserved/collect.sh DIR snap       traces/h200_torchvision's worst reserved runs
#                                                           with the allocator's history
#   bash experiments/repeat_and_reserved/collect.sh DIR time R     round R of the held-out runs:
#                                                           each model, each allocator, a
#                                                           fresh process -> DIR/time.jsonl
#   bash experiments/repeat_and_reserved/collect.sh DIR caps       capped runs at the median reserved
#                                                           of the rounds +-3% -> DIR/caps.jsonl
#   bash experiments/repeat_and_reserved/collect.sh DIR profile    vdnnsim profile of each model
# Set B (the same with `vdnnsim measure --repeat 3`; MODELS=set B):
#   bash experiments/repeat_and_reserved/collect.sh DIR repeat-b K  each model, each allocator:
#                                                           --repeat 3 (K discarded processes
#                                                           first, then 0) -> DIR/b/repeat.jsonl
#   bash experiments/repeat_and_reserved/collect.sh DIR caps-b     caps at +-3% of each allocator's
#                                                           median reserved -> DIR/b/caps.jsonl
#   bash experiments/repeat_and_reserved/collect.sh DIR profile-b  profiles -> DIR/b/profile/
#   bash experiments/repeat_and_reserved/collect.sh DIR plan-b     bloom-560m's block plan (budget 80%
#                                                           of its measured peak allocated),
#                                                           measured --repeat 3 both allocators
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
H="$ROOT/experiments/repeat_and_reserved"
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
    bloom-560m) echo "--model hf:$H/bloom-560m.yaml -b 4 --seq-len 512 --dtype autocast-bf16 --optimizer adamw" ;;
    swin-tiny) echo "--model hf:$H/swin-tiny.yaml -b 64 --dtype fp32 --optimizer sgd" ;;
    mobilevit-small) echo "--model hf:$H/mobilevit-small.yaml -b 64 --dtype fp32 --optimizer sgd" ;;
  esac
}
MODELS="qwen2-0.5b pythia-410m convnext-tiny"
MODELS_B=${MODELS_B:-"bloom-560m swin-tiny mobilevit-small"}  # a subset by environment
B="$DIR/b"
mkdir -p "$B/profile"
# the median of a JSONL's field over the records of NAME (and allocator conf ALLOC)
median() {  # FILE NAME ALLOC FIELD FACTOR
  python3 - "$@" <<'PY'
import json, sys
f, name, alloc, field, factor = sys.argv[1:]
for x in open(f):
    r = json.loads(x)
    if r.get("name") == name and r.get("alloc") == alloc and r.get(field):
        print(int(r[field] * float(factor)))
        break
PY
}
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
  repeat-b)
    K=$3
    for m in $MODELS_B; do
      for alloc in default expandable; do
        a=""; [ $alloc = expandable ] && a="--allocator expandable_segments=true"
        # shellcheck disable=SC2046,SC2086
        python3 -m vdnnsim measure $(spec $m) --repeat 3 --warmup-processes "$K" $a --json > "$B/m.json" 2> "$B/m.err"
        line "$B/m.json" "$B/m.err" name=$m alloc=$alloc >> "$B/repeat.jsonl"
        K=0
      done
    done ;;
  caps-b)
    i=0
    for m in $MODELS_B; do
      for alloc in default expandable; do
        a=""; [ $alloc = expandable ] && a="--allocator expandable_segments=true"
        for f in 0.97 1.03; do
          cap=$(median "$B/repeat.jsonl" $m $alloc peak_reserved_bytes $f)
          [ -z "$cap" ] && continue
          # shellcheck disable=SC2046,SC2086
          (python3 -m vdnnsim measure $(spec $m) --memory-cap "$cap" $a --json > "$B/c_${m}_${alloc}_$f.json" 2> "$B/c_${m}_${alloc}_$f.err";
           line "$B/c_${m}_${alloc}_$f.json" "$B/c_${m}_${alloc}_$f.err" name=$m alloc=$alloc factor=$f >> "$B/caps.jsonl") &
          i=$((i + 1)); [ $((i % 4)) -eq 0 ] && wait
        done
      done
    done
    wait ;;
  profile-b)
    for m in $MODELS_B; do
      # shellcheck disable=SC2046
      python3 -m vdnnsim profile $(spec $m) --no-check -o "$B/profile/$m.yaml.gz" > "$B/profile/$m.log" 2>&1
      echo "$m rc=$?" >> "$B/profile/profile.txt"
    done ;;
  plan-b)
    m=bloom-560m
    budget=$(median "$B/repeat.jsonl" $m default peak_allocated_bytes 0.8)
    printf 'network: profile/%s.yaml.gz\ngpu: h200\noptimizer: adamw\npolicy: eager\n' $m > "$B/run.yaml"
    python3 -m vdnnsim plan "$B/run.yaml" --budget "$budget" --method blocks -o "$B/plan.yaml" > "$B/plan.log" 2>&1
    for alloc in default expandable; do
      a=""; [ $alloc = expandable ] && a="--allocator expandable_segments=true"
      # shellcheck disable=SC2046,SC2086
      python3 -m vdnnsim measure $(spec $m) --plan "$B/plan.yaml" --repeat 3 --warmup-processes 0 $a --json > "$B/m.json" 2> "$B/m.err"
      line "$B/m.json" "$B/m.err" name=$m alloc=$alloc budget=$budget >> "$B/planned.jsonl"
    done ;;
esac
