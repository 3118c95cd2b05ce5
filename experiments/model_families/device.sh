#!/usr/bin/env bash
# Every GPU measurement of issue 57, in one device call (or two: it resumes):
#   bash experiments/model_families/device.sh OUT SECONDS
# 1. measure_heldout.py: the held-out families' peak allocated memory, three fresh
#    processes a run, six runs at a time: OUT/families.jsonl, OUT/families.log; then
#    steps.yaml's two step-option cases (--micro-batches, --grad-checkpointing) alike;
# 2. router_load.py: the MoE models' random-weight routers against the balanced
#    assumption, on the GPU in bf16 and fp32: OUT/router_load.json (once a machine).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: device.sh OUT SECONDS}
END=$(( $(date +%s) + ${2:?usage: device.sh OUT SECONDS} ))
mkdir -p "$OUT"
cd "$ROOT" || exit 2
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$ROOT/experiments/repeat_and_reserved/device_env.sh"
if [ ! -e /tmp/vdnnsim_router_load ]; then
  python3 "$HERE/router_load.py" "$OUT/router_load.json" > "$OUT/router_load.txt" 2>&1 \
    && touch /tmp/vdnnsim_router_load
fi
left=$(( END - $(date +%s) - 60 ))
[ "$left" -gt 0 ] && python3 "$HERE/measure_heldout.py" "$OUT" --seconds "$left" --jobs 6 \
  >> "$OUT/families.log" 2>&1
exit 0
