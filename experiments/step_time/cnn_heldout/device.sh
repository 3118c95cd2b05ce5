#!/usr/bin/env bash
# GPU (the device machine, H100 or H200; .whl carried, with timm's wheel): issue 58's held-out
# library CNNs (README.md here), each run `vdnnsim measure --repeat 3` (three fresh processes,
# the median of their medians) after one discarded warm-up process a machine:
#   bash experiments/step_time/cnn_heldout/device.sh OUT SECONDS [RUN ...]
# Appends one JSON record a run (with `run`, `rc`, `gpu`) to OUT/measure.jsonl and to STATE
# (/tmp/vdnnsim_cnn_heldout.jsonl, kept while the machine stays lent); a run already in
# either, or in traces/CARD_cnn_heldout/measure.jsonl (earlier calls' records, copied back),
# is skipped. No run starts once less is left of SECONDS than the longest run so far took
# (90 s before the first). RUNs: names from runs.txt, in its order where none are given.
# The machine's host calibration (`vdnnsim calibrate --host`) is written to OUT before the
# runs and after them (hostcal_HHMMSS.json), and the launch queue's depth
# (launch_queue.json); after the runs, on an H200, its host-only op calibration with mixed
# chains (h200_ops_host_mix.json), then profiles of PROFILE's runs while time is left
# (OUT/profiles.tgz).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${1:?usage: device.sh OUT SECONDS [RUN ...]}
END=$(( $(date +%s) + ${2:?usage: device.sh OUT SECONDS [RUN ...]} ))
shift 2
STATE=/tmp/vdnnsim_cnn_heldout.jsonl
mkdir -p "$OUT"
touch "$STATE"
cd "$ROOT" || exit 2
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$ROOT/experiments/repeat_and_reserved/device_env.sh"
export TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1
card=$(python3 -c "import torch; print(torch.cuda.get_device_name(0))")
case "$card" in *H100*) CARD=h100 ;; *H200*) CARD=h200 ;; *) CARD=other ;; esac
KEPT=$ROOT/traces/${CARD}_cnn_heldout/measure.jsonl
echo "[$(date +%T)] $card, timm $(python3 -c 'import timm; print(timm.__version__)')" >> "$OUT/log.txt"
# the machine's host calibration (seconds), before the runs and after: the host's speed drifts
hostcal() { python3 -m vdnnsim calibrate --host -o "$OUT/hostcal_$1.json" >> "$OUT/log.txt" 2>&1; }
hostcal "$(date +%H%M%S)"
# the CUDA launch queue's depth on this machine (seconds; the engine's launch_queue)
[ -s "$OUT/launch_queue.json" ] || python3 -c "
import json, sys, torch
from vdnnsim.gpu.profile.kernels import launch_queue_depth
q = launch_queue_depth()
json.dump(dict(q, gpu=torch.cuda.get_device_name(0), torch=torch.__version__), sys.stdout)
" > "$OUT/launch_queue.json" 2>> "$OUT/log.txt"
runs=${*:-$(awk 'NF { print $1 }' "$HERE/runs.txt")}
# one discarded process on a machine that has run none (the protocol's warm-up)
if [ ! -e /tmp/vdnnsim_cnn_warm ]; then
  python3 -m vdnnsim measure --model timm:create_model --model-arg model_name=selecsls42b \
    --input image:3,224,224 -b 64 --dtype fp32 --json > /dev/null 2>> "$OUT/log.txt"
  touch /tmp/vdnnsim_cnn_warm
  echo "[$(date +%T)] warm-up process done" >> "$OUT/log.txt"
fi
longest=90
for run in $runs; do
  if cat "$STATE" "$KEPT" 2>/dev/null | grep -q "\"run\": \"$run\", \"rc\": 0"; then
    continue
  fi
  args=$(awk -v r="$run" '$1 == r { $1 = ""; $2 = ""; print }' "$HERE/runs.txt")
  model=$(awk -v r="$run" '$1 == r { print $2 }' "$HERE/runs.txt")
  [ -z "$model" ] && { echo "no run $run" >> "$OUT/log.txt"; continue; }
  left=$(( END - $(date +%s) ))
  [ "$left" -lt "$longest" ] && { echo "[$(date +%T)] stop: ${left}s left" >> "$OUT/log.txt"; break; }
  t0=$(date +%s)
  # shellcheck disable=SC2086
  python3 -m vdnnsim measure --model timm:create_model --model-arg model_name="$model" \
    --input image:3,224,224 $args --repeat 3 --warmup-processes 0 --json \
    > "/tmp/cnn_$run.json" 2> "/tmp/cnn_$run.err"
  rc=$?
  python3 - "/tmp/cnn_$run.json" "/tmp/cnn_$run.err" "$run" "$rc" "$card" <<'PY' | tee -a "$STATE" >> "$OUT/measure.jsonl"
import json, sys
out, err, run, rc, card = sys.argv[1:]
try:
    rec = json.loads(open(out).read())
except Exception:
    rec = {"error": open(err).read()[-600:]}
print(json.dumps({"run": run, "rc": int(rc), "gpu": card, **rec}))
PY
  took=$(( $(date +%s) - t0 ))
  [ "$took" -gt "$longest" ] && longest=$took
  echo "[$(date +%T)] $run rc $rc ${took}s" >> "$OUT/log.txt"
done
# on an H200, its host-only op calibration with the mixed chains (NOTE [host mixes]), which
# the shipped H200 model lacks (the H100's has them); once a machine
if [ "$CARD" = h200 ] && [ ! -s /tmp/vdnnsim_h200_host_only.json ] \
    && [ $(( END - $(date +%s) )) -ge 120 ]; then
  python3 -m vdnnsim calibrate --ops --host-only -o /tmp/vdnnsim_h200_host_only.json \
    2>> "$OUT/log.txt" && cp /tmp/vdnnsim_h200_host_only.json "$OUT/h200_ops_host_mix.json"
  echo "[$(date +%T)] host-only calibration rc $?" >> "$OUT/log.txt"
fi
# then profiles (`vdnnsim profile`: each layer's measured times) of PROFILE's runs, for the
# misses' causes, while time is left; kept in /tmp/vdnnsim_cnn_profiles, tarred into OUT
PROFILE=${PROFILE:-selecsls42b-fp32 tresnet_m-fp32 xception41-fp32}
mkdir -p /tmp/vdnnsim_cnn_profiles
for run in $PROFILE; do
  yaml=/tmp/vdnnsim_cnn_profiles/${CARD}_$run.yaml
  [ -s "$yaml" ] && continue
  [ $(( END - $(date +%s) )) -lt 90 ] && break
  args=$(awk -v r="$run" '$1 == r { $1 = ""; $2 = ""; print }' "$HERE/runs.txt")
  model=$(awk -v r="$run" '$1 == r { print $2 }' "$HERE/runs.txt")
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout $(( END - $(date +%s) )) python3 -m vdnnsim profile --model timm:create_model \
    --model-arg model_name="$model" --input image:3,224,224 $args -o "$yaml.part" \
    >> "$OUT/log.txt" 2>&1 && mv "$yaml.part" "$yaml"
  echo "[$(date +%T)] profile $run rc $? $(( $(date +%s) - t0 ))s" >> "$OUT/log.txt"
done
ls /tmp/vdnnsim_cnn_profiles/*.yaml > /dev/null 2>&1 && \
  tar czf "$OUT/profiles.tgz" -C /tmp/vdnnsim_cnn_profiles $(cd /tmp/vdnnsim_cnn_profiles && ls *.yaml)
hostcal "$(date +%H%M%S)"
exit 0
