#!/usr/bin/env bash
# GPU (a device machine of several H200s). Issue 28: remeasure.sh's runs spread over the
# machine's GPUs, one queue per GPU (CUDA_VISIBLE_DEVICES), each queue one run after
# another and starting with its own discarded warm-up process:
#   bash experiments/repeat_and_reserved/remeasure_parallel.sh OUT SECONDS RUN...|@FILE
# (@FILE: one run a line, # comments). Run k goes to queue k mod (number of GPUs); no run starts after SECONDS from now.
# The queues share the host (its CPU and memory bandwidth): a few runs already measured on
# a machine of one GPU go first in each queue as controls (docs/validation.md says what
# they showed). Each queue writes OUT/gpuN/repeat.jsonl and OUT/gpuN/log.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: remeasure_parallel.sh OUT SECONDS RUN...}
SECONDS_LEFT=${2:?usage: remeasure_parallel.sh OUT SECONDS RUN...}
shift 2
N=$(nvidia-smi -L | wc -l)
export DEADLINE=$(( $(date +%s) + SECONDS_LEFT ))
python3 -c "import simpy, pydantic" 2>/dev/null || {
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "$HERE"/../../.whl/*.whl \
    || exit 2; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if [ "${1#@}" != "$1" ]; then
  mapfile -t runs < <(grep -v '^#' "${1#@}" | grep .)
else
  runs=("$@")
fi
for ((g = 0; g < N; g++)); do
  queue=()
  for ((k = g; k < ${#runs[@]}; k += N)); do queue+=("${runs[k]}"); done
  [ ${#queue[@]} -eq 0 ] && continue
  CUDA_VISIBLE_DEVICES=$g WARMUP=${WARMUP:-1} bash "$HERE/remeasure.sh" "$OUT/gpu$g" "${queue[@]}" &
done
wait
