#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28, host-bound step times: does the host probe
# between timed steps (NOTE [host probe]) carry a host-bound step from the process that
# profiled it to the processes that measure it? For each RUN (NAME:BATCH, torchvision,
# fp32, SGD, baseline, no cap), one after another on one machine, after one discarded
# warm-up process (device_env.sh):
#   1. `vdnnsim profile` in a fresh process (the trace carries host_probe_between_ns);
#   2. `vdnnsim measure --repeat 3` (three fresh processes, each with its probes).
#   bash experiments/h200_issue28/probe_scale.sh OUT RUN...
# Writes OUT/NAME_bB.yaml, OUT/runs.jsonl (one record a run, with `run`), OUT/log.txt.
# DEADLINE (epoch seconds): no run starts after it. Judged on the CPU by probe_scale.py,
# whose rule was written before the data.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: probe_scale.sh OUT RUN...}
shift
mkdir -p "$OUT"
source "$ROOT/experiments/h200_issue28/device_env.sh"
for run in "$@"; do
  if [ -n "${DEADLINE:-}" ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then
    echo "[$(date +%T)] $run not started (deadline)" >> "$OUT/log.txt"
    continue
  fi
  name=${run%%:*}; b=${run##*:}
  python3 -m vdnnsim profile --model "torchvision:$name" --batch "$b" --trials 5 \
    -o "$OUT/${name}_b$b.yaml" > "$OUT/p.log" 2>&1
  echo "[$(date +%T)] $run profile rc=$? $(tail -1 "$OUT/p.log")" >> "$OUT/log.txt"
  python3 -m vdnnsim measure --model "torchvision:$name" --batch "$b" --repeat 3 \
    --warmup-processes 0 --json > "$OUT/r.json" 2> "$OUT/r.err"
  rc=$?
  python3 - "$OUT/r.json" "$OUT/r.err" "$run" "$rc" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
path, err, run, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-400:]}
rec.update(run=run, rc=rc)
print(json.dumps(rec))
PY
  echo "[$(date +%T)] $run measure rc=$rc" >> "$OUT/log.txt"
done
rm -f "$OUT/p.log" "$OUT/r.json" "$OUT/r.err"
