#!/usr/bin/env bash
# GPU (the device machine, H200 or H100): the held-out set's plans (make_plans.py, made on a
# CPU before this ran; their predictions in DIR/predicted.json) measured, and PyTorch's own
# options beside them, each as `vdnnsim measure --repeat 3` (three fresh processes, the
# median), after one discarded warm-up process (device_env.sh):
#   bash experiments/tensor_plans/gpu_runs.sh OUT SECONDS [CASE ...]
# DIR is traces/h200_tensor_plans or traces/h100_tensor_plans, by the card (the H200's on an
# H100 without its own). Resumable: a run done in DIR/runs_CARD.jsonl (earlier calls'
# OUT/runs.jsonl, copied back) or in STATE (GPU_RUNS_STATE, default
# /tmp/vdnnsim_gpu_runs.jsonl: every record of this machine, kept while it stays lent) is
# skipped: one that ran (rc 0) of its case's present plan and budget. No run starts
# SECONDS after the start, nor once less is left than the longest run so far took. Each record (or error) is a line of OUT/runs.jsonl and of STATE with `name`,
# `rc` and `gpu`. Names: KEY-tensors (the tensor plan), KEY-ckpt (every block checkpointed,
# PyTorch's checkpoint), KEY-save_on_cpu (PyTorch's save_on_cpu under the cap), KEY-blocks
# (the block plan, where it is faster), MODEL-eager (no cap; with a KEY given, after its
# runs); KEY is MODEL-50 or MODEL-70.
# Case by case, in that order, the model's step without a cap after its first case; the
# cases in heldout.yaml's order, or the CASEs' (a KEY, a MODEL or one run's name) where given.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: gpu_runs.sh OUT SECONDS [NAME...]}
DEADLINE=$(( $(date +%s) + ${2:?usage: gpu_runs.sh OUT SECONDS [NAME...]} ))
shift 2
mkdir -p "$OUT"
cd "$ROOT" || exit 2
card=$(python3 -c "import torch; print(torch.cuda.get_device_name(0))" 2>/dev/null)
case "$card" in
  *H100*) CARD=h100 ;;
  *) CARD=h200 ;;
esac
DIR=$ROOT/traces/${CARD}_tensor_plans
# the H200's plans on an H100 where it has none of its own (the caps hold as they are; the
# predictions for the H100 are those plans replayed on its preset, made afterwards)
[ -d "$DIR" ] || DIR=$ROOT/traces/h200_tensor_plans
echo "[$(date +%T)] $card: $DIR" >> "$OUT/log.txt"
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$ROOT/experiments/repeat_and_reserved/device_env.sh"
R3="--repeat 3 --warmup-processes 0"
# every run, in order: name and measure's arguments
RUNS=$(python3 - "$DIR" "$HERE/heldout.yaml" "$R3" "$@" <<'PY'
import json, sys, yaml
from pathlib import Path
d, spec, r3 = Path(sys.argv[1]), yaml.safe_load(open(sys.argv[2])), sys.argv[3]
pred = json.loads((d / "predicted.json").read_text())
models = {m["name"]: m for m in spec["models"]}
def flags(m):
    f = f"--model {m['spec']} -b {m['batch']} --dtype {m['dtype']} --optimizer adamw"
    f += f" --seq-len {m['seq_len']}" if m.get("seq_len") else ""
    f += f" --input {m['input']}" if m.get("input") else ""
    f += "".join(f" --model-arg {k}={v}" for k, v in (m.get("model_args") or {}).items())
    return f
runs = []  # case by case: the tensor plan, PyTorch's options, the block plan where faster
for name, m in models.items():
    keys = [k for k, p in pred.items() if p["model"] == name]
    for i, key in enumerate(keys):
        p = pred[key]
        conf = f" --allocator {p['allocator'].replace(':', '=')}" if p.get("allocator") else ""
        plan = d / "plans" / f"{key}-tensors.yaml"
        if plan.exists():
            runs.append(f"{key}-tensors|--plan {plan} {r3}")
        for kind in ("ckpt", "blocks"):
            f = d / "plans" / f"{key}-{kind}.yaml"
            slower = p["tensors"]["fits"] and p["blocks"]["iteration_time_ns"] >= \
                p["tensors"]["iteration_time_ns"]
            if f.exists() and not (kind == "blocks" and slower):
                runs.append(f"{key}-{kind}|{flags(m)} --plan {f} {r3}")
        runs.append(f"{key}-save_on_cpu|{flags(m)}{conf} --policy save_on_cpu "
                    f"--memory-cap {p['budget_bytes']} {r3}")
        if i == 0:
            runs.append(f"{name}-eager|{flags(m)}{conf} {r3}")
cases = sys.argv[4:]  # a KEY, a MODEL or a run: its runs, in the order given
if cases:
    runs = [r for c in cases for r in runs if r.split("|")[0] == c or
            r.split("|")[0].startswith(c + "-") or
            r.split("|")[0] == c.rstrip("0123456789").rstrip("-") + "-eager"]
print("\n".join(dict.fromkeys(runs)))
PY
)
STATE=${GPU_RUNS_STATE:-/tmp/vdnnsim_gpu_runs.jsonl}
# done: records.py's (a record of the plan made now, under its cap)
done_names=$(cat "$DIR/runs_$CARD.jsonl" "$STATE" 2>/dev/null | python3 "$HERE/records.py" "$DIR")
longest=0
while IFS='|' read -r name args; do
  [ -z "$name" ] && continue
  if printf '%s\n' "$done_names" | grep -qx "$name"; then continue; fi
  if [ $(( $(date +%s) + longest )) -ge "$DEADLINE" ]; then
    echo "[$(date +%T)] $name not started (deadline)" >> "$OUT/log.txt"
    continue
  fi
  t0=$(date +%s)
  # shellcheck disable=SC2086
  python3 -m vdnnsim measure $args --json > "$OUT/r.json" 2> "$OUT/r.err"
  rc=$?
  python3 - "$OUT/r.json" "$OUT/r.err" "$name" "$rc" "$card" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
path, err, name, rc, card = sys.argv[1:6]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-600:]}
rec.update(name=name, rc=int(rc), gpu=card)
print(json.dumps(rec))
PY
  tail -n 1 "$OUT/runs.jsonl" >> "$STATE"
  took=$(( $(date +%s) - t0 ))
  [ "$took" -gt "$longest" ] && longest=$took
  echo "[$(date +%T)] $name rc=$rc $took s" >> "$OUT/log.txt"
done <<< "$RUNS"
rm -f "$OUT/r.json" "$OUT/r.err"
