#!/usr/bin/env bash
# GPU (the device machine, H200 or H100): what the op model needs for 3-D convolutions and
# what checks it, for one device call or two:
#   bash experiments/op_model/video_device.sh OUT SECONDS [CASE ...]
# 1. `vdnnsim calibrate --ops --classes video` in fp32 and bf16 (the 3-D convolutions'
#    microbenchmarks and workspaces): OUT/CARD_ops_video_DTYPE.json;
# 2. on a card without a shipped op calibration of its own (the H100), the rest of one:
#    the transformer grids (fp32, bf16), the CNN grids (scale 0.6, as the H200's) and the
#    host's chains, less what traces/h200_op_model_heldout/h100_sets12/cal/ has from an
#    earlier loan: OUT/CARD_ops_NAME.json;
# 3. the held-out video CNNs' uncapped steps (experiments/tensor_plans/heldout.yaml; three
#    fresh processes each) on a card that has none measured: OUT/steps_CARD.jsonl;
# 4. with what is left of SECONDS, experiments/tensor_plans/device.sh OUT LEFT CASE ...
# Everything but 4's files is packed into OUT/op_calibration.tgz after each step.
# Resumable: a step whose file is in the repository (vdnnsim/data/calibration/,
# traces/CARD_video_steps/) or was made on this machine (/tmp/vdnnsim_video) is skipped.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: video_device.sh OUT SECONDS [CASE ...]}
END=$(( $(date +%s) + ${2:?usage: video_device.sh OUT SECONDS [CASE ...]} ))
shift 2
mkdir -p "$OUT" /tmp/vdnnsim_video
cd "$ROOT" || exit 2
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$ROOT/experiments/repeat_and_reserved/device_env.sh"
card=$(python3 -c "import torch; print(torch.cuda.get_device_name(0).split()[1].lower())")
CAL=$ROOT/vdnnsim/data/calibration
W=/tmp/vdnnsim_video
pack() { tar -czf "$OUT/op_calibration.tgz" -C "$W" . ; }
left() { echo $(( END - $(date +%s) )); }
# the H100's transformer grids and host chains, made on an earlier loan
EARLIER=$ROOT/traces/h200_op_model_heldout/h100_sets12/cal
calibrate() {  # NAME, then calibrate's arguments
  local name=$1; shift
  [ -e "$CAL/${card}_ops_$name.json" ] || [ -e "$W/${card}_ops_$name.json" ] || \
    [ -e "$EARLIER/${card}_ops_$name.json" ] && return 0
  [ "$(left)" -lt 200 ] && { echo "$name not started (deadline)" >> "$W/log.txt"; return 0; }
  local t0; t0=$(date +%s)
  python3 -m vdnnsim calibrate --ops "$@" -o "$W/${card}_ops_$name.json" >> "$W/log.txt" 2>&1
  echo "[$(date +%T)] $card $name rc=$? $(( $(date +%s) - t0 )) s" >> "$W/log.txt"
  pack
}
calibrate video_fp32 --classes video --dtype fp32
calibrate video_bf16 --classes video --dtype bf16
if [ ! -e "$CAL/${card}_ops.model.json" ]; then  # a card without its own op model
  calibrate bf16 --classes transformer --dtype bf16
  calibrate fp32 --classes transformer --dtype fp32
  calibrate cnn_bf16 --classes cnn --scale 0.6 --dtype bf16
  calibrate cnn_fp32 --classes cnn --scale 0.6 --dtype fp32
  [ -e "$EARLIER/host_1.json" ] || calibrate host --host-only
fi
STEPS=$ROOT/traces/${card}_video_steps/steps_$card.jsonl
if [ ! -e "$STEPS" ] && [ "$card" != h100 ]; then  # the H100's are in runs_h100.jsonl
  python3 - "$ROOT/experiments/tensor_plans/heldout.yaml" <<'PY' > "$W/video_runs.txt"
import sys, yaml
for m in yaml.safe_load(open(sys.argv[1]))["models"]:
    if "video CNN" in m["family"]:
        f = f"--model {m['spec']} -b {m['batch']} --dtype {m['dtype']} --optimizer adamw"
        f += f" --input {m['input']}" if m.get("input") else ""
        f += "".join(f" --model-arg {k}={v}" for k, v in (m.get("model_args") or {}).items())
        print(f"{m['name']}-eager|{f}")
PY
  while IFS='|' read -r name args; do
    grep -q "\"name\": \"$name\"" "$W/steps_$card.jsonl" 2>/dev/null && continue
    [ "$(left)" -lt 150 ] && { echo "$name not started (deadline)" >> "$W/log.txt"; continue; }
    t0=$(date +%s)
    # shellcheck disable=SC2086
    python3 -m vdnnsim measure $args --repeat 3 --warmup-processes 0 --json \
      > "$W/r.json" 2> "$W/r.err"
    rc=$?
    python3 - "$W/r.json" "$W/r.err" "$name" "$rc" "$card" >> "$W/steps_$card.jsonl" <<'PY'
import json, sys
path, err, name, rc, card = sys.argv[1:6]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-600:]}
rec.update(name=name, rc=int(rc), gpu=card)
print(json.dumps(rec))
PY
    echo "[$(date +%T)] $name rc=$rc $(( $(date +%s) - t0 )) s" >> "$W/log.txt"
    pack
  done < "$W/video_runs.txt"
  rm -f "$W/r.json" "$W/r.err"
fi
pack
[ "$#" -gt 0 ] && [ "$(left)" -gt 120 ] && \
  bash "$ROOT/experiments/tensor_plans/device.sh" "$OUT" "$(left)" "$@"
exit 0
