#!/usr/bin/env bash
# GPU machine (the lent H100/H200). Issue 31, session 32: the host's CPU optimizer step
# swept over thread counts (NOTE [cpu step model]), then whole steps with the optimizer on
# the CPU, to hold the model fitted from the sweep alone against them:
#   DEADLINE=EPOCH bash experiments/cpu_step/loan.sh OUT STEP...
# STEP: host (lscpu, free), sweep (vdnnsim calibrate --cpu-step), h200proto (the CPU step's
# microbenchmark as traces/h200_optimizer_offload/cpu_steps.json ran it, on torch's default threads),
# contention (experiments/offload_runs/cpu_contention.py in three fresh processes, NOTE
# [copy contention]), warmup (a discarded process), or a run NAME below (vdnnsim measure --repeat 3, record in OUT/runs.jsonl).
# No step starts after DEADLINE, a run still going at END is stopped; OUT is packed into
# OUT/out.tgz after each step.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: loan.sh OUT STEP...}
shift
DEADLINE=${DEADLINE:-$(( $(date +%s) + 560 ))}  # no step starts after it
END=${END:-$(( DEADLINE + 30 ))}  # and a run still going then is stopped
WORK=$OUT/work
mkdir -p "$WORK"
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$ROOT"/.whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
L1="--model hf:llama-1b -b 2 --seq-len 2048 --dtype autocast-bf16 --optimizer adamw"
L3="--model hf:llama-3b -b 1 --seq-len 1024 --dtype autocast-bf16 --optimizer adamw"
L7="--model hf:llama-7b -b 1 --seq-len 2048 --dtype autocast-bf16 --optimizer adamw"
R3="--repeat 3 --warmup-processes 0"
declare -A RUN=(
  [1b-offload]="$L1 --optimizer-offload $R3"
  [1b-plain]="$L1 $R3"
  [3b-offload]="$L3 --optimizer-offload $R3"
  # the notebook's 7B (make_7b.py printed the predictions before this ran), the host's
  # copies registered in one buffer (NOTE [optimizer pinning]): one process each, the step
  # named again for each fresh process (the records aggregated afterwards)
  [7b-offload]="$L7 --optimizer-offload --optimizer-pinning registered"
  [7b-plan-22g]="$L7 --plan $ROOT/traces/h100_cpu_step/host_sweep/plan-7b-22g-expandable.yaml --memory-cap 22GiB --optimizer-pinning registered"
  # after it ran out of memory: the plan for the budget the planner's caution keeps
  [7b-margin]="$L7 --plan $ROOT/traces/h100_cpu_step/host_sweep/plan-7b-margin-expandable.yaml --memory-cap 22GiB --optimizer-pinning registered"
  [1b-offload-t8]="$L1 --optimizer-offload $R3"
  [3b-offload-t8]="$L3 --optimizer-offload $R3"
)
# runs on fewer threads than torch's default (what the CPU step runs on), predicted by the
# roofline's what-if from the sweep (NOTE [cpu step model])
declare -A THREADS=([1b-offload-t8]=8 [3b-offload-t8]=8)
for step in "$@"; do
  if [ "$(date +%s)" -ge "$DEADLINE" ]; then
    echo "[$(date +%T)] $step not started (deadline)" >> "$WORK/log.txt"
    continue
  fi
  t0=$(date +%s)
  case $step in
    host) { lscpu; free -g; nproc; python3 -c "import torch; print(torch.__version__, torch.get_num_threads(), torch.cuda.get_device_name())"; } > "$WORK/host.txt" 2>&1; rc=$? ;;
    sweep) python3 -m vdnnsim calibrate --cpu-step -o "$WORK/cpu_sweep.json" > "$WORK/sweep.txt" 2>&1; rc=$? ;;
    h200proto) python3 -c "
import json, sys, torch
from vdnnsim.gpu.runtime.cpu_optimizer import time_cpu_steps
json.dump({'software': {'torch': torch.__version__}, 'records': time_cpu_steps('adamw', ('fp32', 'bf16'))}, open(sys.argv[1], 'w'))
" "$WORK/cpu_steps.json" 2> "$WORK/h200proto.err"; rc=$? ;;
    contention) rc=0; for i in 1 2 3; do python3 "$ROOT/experiments/offload_runs/cpu_contention.py" "$WORK/contention$i.json" 6 >> "$WORK/contention.txt" 2>&1 || rc=$?; done ;;
    warmup) python3 -m vdnnsim measure --model torchvision:resnet50 --batch 64 --json > "$WORK/warmup.json" 2>/dev/null; rc=$? ;;
    *)
      # shellcheck disable=SC2086
      (if [ -n "${THREADS[$step]:-}" ]; then export OMP_NUM_THREADS=${THREADS[$step]}; fi
       left=$(( END - $(date +%s) ))  # a run is stopped at END, what it wrote kept
       timeout "$(( left > 1 ? left : 1 ))" python3 -m vdnnsim measure ${RUN[$step]} --json > "$WORK/r.json" 2> "$WORK/r.err")
      rc=$?
      python3 - "$WORK/r.json" "$WORK/r.err" "$step" "$rc" >> "$WORK/runs.jsonl" <<'PY'
import json, sys
path, err, name, rc = sys.argv[1:5]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-600:]}
rec.update(name=name, rc=int(rc))
print(json.dumps(rec))
PY
      rm -f "$WORK/r.json" "$WORK/r.err" ;;
  esac
  echo "[$(date +%T)] $step rc=$rc $(( $(date +%s) - t0 )) s" >> "$WORK/log.txt"
  tar -czf "$OUT/out.tgz" -C "$WORK" .
done
