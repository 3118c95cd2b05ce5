#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 31, session 23: parameters on the host (NOTE
# [parameter offload]) measured, with the plans of traces/h200_optimizer_offload/parameter_offload (made by
# make_plans.py on a CPU before this ran; their predictions are in the files):
#   bash experiments/offload_runs/param_loan.sh OUT SECONDS [NAME ...]
# NAME picks runs from the list below (default: all, in order). One discarded warm-up
# process first (device_env.sh); each run's record (or error) is a line of OUT/runs.jsonl
# with `name` and `rc`; no run starts SECONDS after the start.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: param_loan.sh OUT SECONDS [NAME...]}
DEADLINE=$(( $(date +%s) + ${2:?usage: param_loan.sh OUT SECONDS [NAME...]} ))
shift 2
mkdir -p "$OUT"
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$ROOT/experiments/repeat_and_reserved/device_env.sh"
P=$ROOT/traces/h200_optimizer_offload/parameter_offload
P24=$ROOT/traces/h200_optimizer_offload/plans_3b
P25=$ROOT/traces/h200_optimizer_offload/plans_3b_expandable
L3="--model hf:llama-3b -b 1 --seq-len 1024 --dtype autocast-bf16 --optimizer adamw"
L1="--model hf:llama-1b -b 2 --seq-len 2048 --dtype autocast-bf16 --optimizer adamw"
R3="--repeat 3 --warmup-processes 0"
declare -A RUN=(
  [3b-plan-22g]="$L3 --plan $P/plan-3b-22g.yaml --memory-cap 22GiB $R3"
  [3b-save-on-cpu-22g]="$L3 --policy save_on_cpu --memory-cap 22GiB"
  [3b-checkpoint-all-22g]="$L3 --plan $P/plan-3b-recompute26.yaml --memory-cap 22GiB"
  [3b-params26-22g]="$L3 --plan $P/plan-3b-params26.yaml --memory-cap 22GiB $R3"
  [1b-params22]="$L1 --plan $P/plan-1b-params22.yaml $R3"
  # after the first loan: the 22 GiB plan ran out of memory under its cap; the same plan
  # without a cap, with the allocator's history, and the planner's plan for 21 GiB (the
  # engine's allocated peak of this model was 2.4% short before) under the 22 GiB cap
  [3b-plan-22g-nocap]="$L3 --plan $P/plan-3b-22g.yaml --memory-history $OUT/plan-3b-22g-nocap.pickle"
  [3b-plan-21g-under-22g]="$L3 --plan $P/plan-3b-21g.yaml --memory-cap 22GiB $R3"
  # session 24: every block's parameters on the host without a cap, with the history
  # (its reserved peak was predicted 7.1% short under the cap)
  [3b-params26-nocap]="$L3 --plan $P/plan-3b-params26.yaml --memory-history $OUT/plan-3b-params26-nocap.pickle"
  # session 24, after the fix of autocast's cached casts (NOTE [autocast cache]): the
  # planner's plan under 22 GiB (made by make_plans24.py before this ran), under the cap,
  # and without one with the history
  [3b-plan24-22g]="$L3 --plan $P24/plan-3b-22g.yaml --memory-cap 22GiB $R3"
  [3b-plan24-nocap]="$L3 --plan $P24/plan-3b-22g.yaml --memory-history $OUT/plan24-3b-22g-nocap.pickle"
  # after it ran out of memory under the cap (fragmentation: 21.62 GiB allocated without
  # one): the same plan under 22 GiB with expandable segments (predicted before: fits,
  # 21.37 GiB allocated, 21.61 reserved, 984.3 ms)
  # and under the cap with the allocator's segments where it runs out of memory
  [3b-plan24-22g-oom]="$L3 --plan $P24/plan-3b-22g.yaml --memory-cap 22GiB --memory-history $OUT/plan24-3b-22g-oom.pickle"
  [3b-plan24-22g-expandable]="$L3 --plan $P24/plan-3b-22g.yaml --memory-cap 22GiB --allocator expandable_segments=true $R3"
  # session 25, after that trained: the planner's plan made under expandable segments
  # (make_plans25.py, predictions in plans_3b_expandable/predicted.txt written before this ran; the
  # plan file carries the setting, so no --allocator), and the session-24 plan under
  # expandable segments without a cap, with the allocator's history
  [3b-plan25-22g-expandable]="$L3 --plan $P25/plan-3b-22g-expandable.yaml --memory-cap 22GiB $R3"
  [3b-plan24-expandable-nocap]="$L3 --plan $P24/plan-3b-22g.yaml --allocator expandable_segments=true --memory-history $OUT/plan24-3b-expandable-nocap.pickle"
)
NAMES=${*:-"3b-plan-22g 3b-save-on-cpu-22g 3b-checkpoint-all-22g 3b-params26-22g 1b-params22"}
for name in $NAMES; do
  if [ "$(date +%s)" -ge "$DEADLINE" ]; then
    echo "[$(date +%T)] $name not started (deadline)" >> "$OUT/log.txt"
    continue
  fi
  t0=$(date +%s)
  # shellcheck disable=SC2086
  python3 -m vdnnsim measure ${RUN[$name]} --json > "$OUT/r.json" 2> "$OUT/r.err"
  rc=$?
  python3 - "$OUT/r.json" "$OUT/r.err" "$name" "$rc" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
path, err, name, rc = sys.argv[1:5]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-600:]}
rec.update(name=name, rc=int(rc))
print(json.dumps(rec))
PY
  echo "[$(date +%T)] $name rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
done
rm -f "$OUT/r.json" "$OUT/r.err"
