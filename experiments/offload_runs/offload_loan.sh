#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 31, session 21, written before it ran: the ground
# truth for the optimizer's state and step on the CPU (NOTE [optimizer offload]).
#   bash experiments/offload_runs/offload_loan.sh OUT SECONDS
# 1. one discarded warm-up process (device_env.sh);
# 2. the host's CPU step, microbenchmarked (time_cpu_steps: fused AdamW, fp32 and bf16,
#    the machine's default threads): OUT/cpu_steps.json, with lscpu and free in host.txt;
# 3. for each model (hf, batch, sequence; autocast-bf16, AdamW): the profile
#    (OUT/NAME_bB_sS.yaml), then `vdnnsim measure --repeat 3` plain and with
#    --optimizer-offload (OUT/runs.jsonl, one record a line); once under a cap that plain
#    training cannot fit: the 1.1B at 2 x 2048 under the 24 GB card's 22 GiB (which no
#    block plan fits with the default allocator, traces/h200_llama_22gib), the 3B under 40 GiB
#    (and plain training there, once).
# Nothing starts after SECONDS from the start.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: offload_loan.sh OUT SECONDS}
DEADLINE=$(( $(date +%s) + ${2:?usage: offload_loan.sh OUT SECONDS} ))
mkdir -p "$OUT"
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$ROOT/experiments/repeat_and_reserved/device_env.sh"
{ lscpu; free -g; nproc; } > "$OUT/host.txt" 2>&1
python3 - "$OUT/cpu_steps.json" <<'PY'
import json, sys
from vdnnsim.gpu.runtime.cpu_optimizer import time_cpu_steps
from vdnnsim.gpu.profile.layers import software
recs = time_cpu_steps("adamw", ("fp32", "bf16"))
json.dump({"software": software(), "records": recs}, open(sys.argv[1], "w"), indent=1)
PY
echo "[$(date +%T)] cpu steps rc=$?" >> "$OUT/log.txt"
# NAME:BATCH:SEQ:WHAT[:CAP]: profile, plain or offload (--repeat 3), plain1 or offload1 (one
# process, under CAP GiB: plain training that cannot fit beside the offloaded run that does)
for job in llama-1b:2:2048:profile llama-1b:2:2048:plain llama-1b:2:2048:offload \
    llama-1b:2:2048:offload1:22 \
    llama-3b:1:1024:profile llama-3b:1:1024:plain llama-3b:1:1024:offload \
    llama-3b:1:1024:offload1:40 llama-3b:1:1024:plain1:40 \
    gpt2-medium:8:512:profile gpt2-medium:8:512:plain gpt2-medium:8:512:offload; do
  IFS=: read -r name b s what cap <<< "$job"
  if [ "$(date +%s)" -ge "$DEADLINE" ]; then
    echo "[$(date +%T)] $job not started (deadline)" >> "$OUT/log.txt"; continue
  fi
  common=(--model "hf:$name" --batch "$b" --seq-len "$s" --dtype autocast-bf16 --optimizer adamw)
  [ -n "${cap:-}" ] && common+=(--memory-cap "${cap}GiB")
  case $what in
    profile) python3 -m vdnnsim profile "${common[@]}" -o "$OUT/${name}_b${b}_s${s}.yaml" \
               > "$OUT/w.log" 2>&1 ;;
    plain) python3 -m vdnnsim measure "${common[@]}" --repeat 3 --warmup-processes 0 --json \
               > "$OUT/w.json" 2> "$OUT/w.log" ;;
    offload) python3 -m vdnnsim measure "${common[@]}" --optimizer-offload --repeat 3 \
               --warmup-processes 0 --json > "$OUT/w.json" 2> "$OUT/w.log" ;;
    plain1) python3 -m vdnnsim measure "${common[@]}" --json > "$OUT/w.json" 2> "$OUT/w.log" ;;
    offload1) python3 -m vdnnsim measure "${common[@]}" --optimizer-offload --json \
               > "$OUT/w.json" 2> "$OUT/w.log" ;;
  esac
  rc=$?
  if [ "$what" != profile ]; then
    python3 - "$OUT/w.json" "$OUT/w.log" "$job" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
try:
    rec = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    rec = {"error": open(sys.argv[2]).read()[-400:]}
rec["job"] = sys.argv[3]
print(json.dumps(rec))
PY
  fi
  echo "[$(date +%T)] $job rc=$rc: $(tail -1 "$OUT/w.log" | cut -c1-300)" >> "$OUT/log.txt"
done
rm -f "$OUT/w.json" "$OUT/w.log"
