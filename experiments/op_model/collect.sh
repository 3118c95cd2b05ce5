#!/usr/bin/env bash
# GPU (the H200 device machine; simpy and pydantic importable, docs/gpu.md). Issue 29's
# held-out measurements (README.md here), appending to DIR/measure.jsonl:
#   bash experiments/op_model/collect.sh DIR warmup        one discarded measure process
#   bash experiments/op_model/collect.sh DIR measure RUNS  each run of RUNS (names from
#                                                              runs.txt), --repeat 3 after 0
#                                                              more discarded processes
# SET=experiments/op_model/set2 (relative to the repository) takes the runs and configs
# of another held-out set; the default is this folder's.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
H="$ROOT/${SET:-experiments/op_model}"
DIR=$1
WHAT=$2
mkdir -p "$DIR"
case $WHAT in
  warmup)
    python3 -m vdnnsim measure --model hf:$ROOT/experiments/op_model/distilbert-base.yaml -b 32 --seq-len 256 \
      --optimizer adamw --json > "$DIR/warmup.json" 2> "$DIR/warmup.err" ;;
  measure)
    for run in $3; do
      args=$(awk -v r="$run" '$1 == r { $1 = ""; print }' "$H/runs.txt")
      [ -z "$args" ] && { echo "no run $run" >&2; continue; }
      m=$(echo "$args" | awk '{print $1}')
      rest=$(echo "$args" | cut -d' ' -f3-)
      t0=$(date +%s)
      python3 -m vdnnsim measure --model "hf:$H/$m.yaml" $rest --repeat 3 \
        --warmup-processes 0 --json > "$DIR/$run.json" 2> "$DIR/$run.err"
      rc=$?
      python3 - "$DIR/$run.json" "$DIR/$run.err" "$run" "$rc" >> "$DIR/measure.jsonl" <<'PY'
import json, sys
out, err, run, rc = sys.argv[1:]
try:
    rec = json.loads(open(out).read())
except Exception:
    rec = {"error": open(err).read()[-600:]}
rec.update(run=run, rc=int(rc))
print(json.dumps(rec))
PY
      echo "$run rc $rc $(( $(date +%s) - t0 )) s"
    done ;;
esac
