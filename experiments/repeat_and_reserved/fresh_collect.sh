#!/usr/bin/env bash
# GPU (the H200 device machine). Each run of a runs file measured by issue 28's protocol
# (NOTE [repeated measurement]: one discarded warm-up process, then 3 fresh processes),
# then once more in one process that records the allocator's history (NOTE [snapshot
# segments]), whose segments at the peak are read at once (OUT relative to the working
# directory):
#   bash experiments/repeat_and_reserved/fresh_collect.sh OUT [RUNS] [WHEELS]
# RUNS (default experiments/repeat_and_reserved/fresh_runs.txt): one run a line, whitespace-separated,
#   MODEL BATCH POLICY CAP DTYPE OPTIMIZER ALLOCATOR [MORE MEASURE ARGUMENTS]
# with `-` for no cap (else a size such as 12GiB) and for PyTorch's allocator defaults
# (else KEY=VALUE[,KEY=VALUE], NOTE [allocator settings]); `#` starts a comment.
# WHEELS (default .whl in the repository): simpy and pydantic wheels, installed into
# /tmp/site where the machine's Python lacks them (docs/gpu.md, "Running on the device
# machine").
# Writes OUT/repeat.jsonl (per run its `measure --repeat 3 --json` record, with `run`, the
# line's number, and `rc`; WARMUP=0 where the machine has run a process already), OUT/history.jsonl (per run the history process's record),
# OUT/runN.pickle.gz (its snapshot), OUT/segments.jsonl (per run `vdnnsim import
# runN.pickle.gz --segments --json`) and OUT/runN.err (stderr of all three).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)  # the repository: its vdnnsim
OUT=${1:?usage: collect.sh OUT [RUNS] [WHEELS]}
RUNS=${2:-$ROOT/experiments/repeat_and_reserved/fresh_runs.txt}
WHEELS=${3:-$ROOT/.whl}
mkdir -p "$OUT"
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# one JSON line: the record a command printed (or its error) with the run's number
line() {  # FILE RUN RC ERRFILE
  python3 - "$@" <<'PY'
import json, sys
path, run, rc, err = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-400:]}
rec.update(run=run, rc=rc)
print(json.dumps(rec))
PY
}

n=0
W=${WARMUP:-1}
while read -r model batch policy cap dtype opt alloc more; do
  n=$((n + 1))
  case "$model" in ''|'#'*) continue ;; esac
  args=(--model "$model" --batch-size "$batch" --policy "$policy" --dtype "$dtype"
        --optimizer "$opt")
  [ "$cap" != - ] && args+=(--memory-cap "$cap")
  if [ "$alloc" != - ]; then
    IFS=, read -ra kv <<< "$alloc"
    for x in "${kv[@]}"; do args+=(--allocator "$x"); done
  fi
  # shellcheck disable=SC2206
  [ -n "${more:-}" ] && args+=($more)
  err="$OUT/run$n.err"
  # one discarded process on the machine, before the first run (NOTE [repeated measurement])
  python3 -m vdnnsim measure "${args[@]}" --repeat 3 --warmup-processes "$W" --json \
    > "$OUT/r.json" 2> "$err"
  W=0
  line "$OUT/r.json" "$n" $? "$err" >> "$OUT/repeat.jsonl"
  rm -f "$OUT/run$n.pickle"
  python3 -m vdnnsim measure "${args[@]}" --memory-history "$OUT/run$n.pickle" --json \
    > "$OUT/h.json" 2>> "$err"
  line "$OUT/h.json" "$n" $? "$err" >> "$OUT/history.jsonl"
  if [ -f "$OUT/run$n.pickle" ]; then
    gzip -f "$OUT/run$n.pickle"
    python3 -m vdnnsim import "$OUT/run$n.pickle.gz" --segments --json > "$OUT/s.json" 2>> "$err"
    line "$OUT/s.json" "$n" $? "$err" >> "$OUT/segments.jsonl"
  fi
  echo "run $n ($model $batch $policy): done" >&2
done < "$RUNS"
rm -f "$OUT/r.json" "$OUT/h.json" "$OUT/s.json"
