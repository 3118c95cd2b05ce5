#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28: runs of traces/h200_torchvision and traces/h200_torchvision_heldout
# measured again by the protocol of NOTE [repeated measurement] (`vdnnsim measure --repeat
# 3`: three fresh processes one after another), one run after another:
#   bash experiments/repeat_and_reserved/remeasure.sh OUT RUN... [-- WHEELS]
# RUN is NAME:BATCH:POLICY (torchvision NAME, fp32, SGD, no cap, default allocator);
# REPEAT (default 3): how many fresh processes a run.
# Appends one JSON line per run to OUT/repeat.jsonl (the record, or the error, with `run`
# and `device`: CUDA_VISIBLE_DEVICES). DEADLINE (epoch seconds): no run starts after it
# (remeasure_parallel.sh's queues stop before the device call's limit).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: remeasure.sh OUT RUN...}
shift
mkdir -p "$OUT"
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
W=${WARMUP:-1}
for run in "$@"; do
  if [ -n "${DEADLINE:-}" ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then
    echo "[$(date +%T)] $run not started (deadline)" >> "$OUT/log.txt"
    continue
  fi
  IFS=: read -r name b policy <<< "$run"
  python3 -m vdnnsim measure --model "torchvision:$name" --batch "$b" --policy "$policy" \
    --repeat "${REPEAT:-3}" --warmup-processes "$W" --json > "$OUT/r.json" 2> "$OUT/r.err"
  rc=$?
  W=0
  python3 - "$OUT/r.json" "$OUT/r.err" "$run" "$rc" "${CUDA_VISIBLE_DEVICES:-}" \
    >> "$OUT/repeat.jsonl" <<'PY'
import json, sys
path, err, run, rc, device = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-400:]}
rec.update(run=run, rc=rc)
if device:
    rec["device"] = device
print(json.dumps(rec))
PY
  echo "[$(date +%T)] $run rc=$rc" >> "$OUT/log.txt"
done
rm -f "$OUT/r.json" "$OUT/r.err"
