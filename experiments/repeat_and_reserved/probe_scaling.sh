#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28, written in session 20 for the next loans, before
# any was run: does the ratio of the probes after the timed steps (NOTE [host probe]:
# host_probe_between_ns, in profiled traces and measure records since session 20) carry a
# host-bound step's time from the host it was profiled on to the host it is measured on?
# On each loan (one device call; a later call on a fresh machine is another host):
#   bash experiments/repeat_and_reserved/probe_scaling.sh OUT SECONDS [-- RUN...]
# 0. (first, on the first loan: probe_ab.sh; session 21 ran its arm A only,
#    traces/h200_reserved_heldout/step_probe_ab) the A/B the step probe asks for: alternate
#    `vdnnsim measure --model torchvision:efficientnet_b0 --batch 32 --repeat 5` with and
#    without --no-step-probe; the host issue times must agree within their bands;
# 1. one discarded warm-up process;
# 2. `vdnnsim profile` of the host-bound models, twice each (two draws of the profiling
#    host), into OUT/NAME_bB_K.yaml;
# 3. `vdnnsim measure --repeat 5` of their baselines (remeasure.sh with REPEAT=5:
#    OUT/repeat.jsonl, one record a line, every process's probes and host times kept);
# 4. RUN... (remeasure.sh's queue, e.g. remeasure_runs_rest.txt from its fifth run) into
#    OUT/queue/. Nothing starts after SECONDS from the start (the first three steps take
#    about 400 s on the H200: give at least 450).
# The test, on CPU afterwards (written before the data, fixed): each trace replayed as
# profiled and with its host costs times (the process's probe / the trace's), against that
# process's time, over loans and draws:
#   .venv/bin/python experiments/repeat_and_reserved/probe_scaling_check.py OUT1 [OUT2 ...]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: probe_scaling.sh OUT SECONDS [-- RUN...]}
SECONDS_LEFT=${2:?usage: probe_scaling.sh OUT SECONDS [-- RUN...]}
shift 2
[ "${1:-}" = -- ] && shift
export DEADLINE=$(( $(date +%s) + SECONDS_LEFT ))
MODELS="efficientnet_b0:32 shufflenet_v2_x1_0:64 mobilenet_v2:64"
mkdir -p "$OUT"
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$HERE/device_env.sh"
for k in 1 2; do
  for run in $MODELS; do
    name=${run%%:*}; b=${run##*:}
    t0=$(date +%s)
    if [ "$t0" -ge "$DEADLINE" ]; then
      echo "$run draw $k not started (deadline)" >> "$OUT/profile_log.txt"
      continue
    fi
    python3 -m vdnnsim profile --model "torchvision:$name" --batch "$b" \
      -o "$OUT/${name}_b${b}_$k.yaml" > "$OUT/p.log" 2>&1
    echo "$run draw $k rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/p.log")" \
      >> "$OUT/profile_log.txt"
  done
done
rm -f "$OUT/p.log"
# shellcheck disable=SC2086
REPEAT=5 WARMUP=0 bash "$HERE/remeasure.sh" "$OUT" $(for run in $MODELS; do
  echo "$run:baseline"; done)
if [ $# -gt 0 ]; then
  WARMUP=0 bash "$HERE/remeasure.sh" "$OUT/queue" "$@"
fi
