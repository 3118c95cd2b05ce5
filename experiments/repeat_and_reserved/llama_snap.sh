#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28, session 23: the Llama-style 1.1B block runs
# (traces/h200_llama_22gib: batch 2 or 4, 2048 tokens, bf16 autocast, AdamW, the first K
# blocks offloaded by the block runtime) whose reserved peaks and fits the engine gets
# wrong, measured again with the allocator's history over the timed steps:
#   bash experiments/repeat_and_reserved/llama_snap.sh OUT SECONDS [RUN ...]
# RUN is B:K:CAP:ALLOC (CAP in GiB or "none"; ALLOC "default" or "expandable"); the
# default list is below. Each run is one fresh `vdnnsim measure` process (3 warm-up and 5
# timed steps) after one discarded warm-up process; its record (or its error) is one line
# of OUT/runs.jsonl with `run` added, its snapshot OUT/llama_bB_kK_CAP_ALLOC.pickle.gz
# (none for a run that ran out of memory). No run starts SECONDS after the start.
# The engine's predictions for these runs, written before they were measured (commit of
# this script): traces/h200_reserved_heldout/llama_block_history/README.md.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: llama_snap.sh OUT SECONDS [RUN...]}
DEADLINE=$(( $(date +%s) + ${2:?usage: llama_snap.sh OUT SECONDS [RUN...]} ))
shift 2
RUNS=${*:-"2:22:none:default 2:8:none:default 2:8:22:expandable 4:18:22:default \
2:12:22:default 2:22:22:default 2:12:none:default"}
mkdir -p "$OUT"
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$HERE/device_env.sh"
for run in $RUNS; do
  if [ "$(date +%s)" -ge "$DEADLINE" ]; then
    echo "[$(date +%T)] $run not started (deadline)" >> "$OUT/log.txt"
    continue
  fi
  IFS=: read -r b k cap alloc <<< "$run"
  plan="$OUT/plan_b${b}_k${k}.yaml"
  cat > "$plan" <<EOF
format: vdnnsim-block-plan
network: llama-1b
batch_size: $b
gpu: h200
budget_bytes: 23622320128  # 22 GiB
optimizer: adamw
blocks: $k
total_blocks: 22
EOF
  args=(--model hf:llama-1b -b "$b" --seq-len 2048 --dtype autocast-bf16 --optimizer adamw
        --plan "$plan" --json)
  [ "$cap" != none ] && args+=(--memory-cap "$cap GiB")
  [ "$alloc" = expandable ] && args+=(--allocator expandable_segments=true)
  snap="$OUT/llama_b${b}_k${k}_${cap}_${alloc}.pickle"
  t0=$(date +%s)
  python3 -m vdnnsim measure "${args[@]}" --memory-history "$snap" > "$OUT/r.json" \
    2> "$OUT/r.err"
  rc=$?
  [ -f "$snap" ] && gzip -f "$snap"
  python3 - "$OUT/r.json" "$OUT/r.err" "$run" "$rc" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
path, err, run, rc = sys.argv[1:5]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-600:]}
rec.update(run=run, rc=int(rc))
print(json.dumps(rec))
PY
  echo "[$(date +%T)] $run rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
done
rm -f "$OUT/r.json" "$OUT/r.err"
