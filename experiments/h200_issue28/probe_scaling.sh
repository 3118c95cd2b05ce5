#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28, written in session 20 for the next loans, before
# any was run: does the ratio of the probes after the timed steps (NOTE [host probe]:
# host_probe_between_ns, in profiled traces and measure records since session 20) carry a
# host-bound step's time from the host it was profiled on to the host it is measured on?
# On each loan (one device call; a later call on a fresh machine is another host):
#   bash experiments/h200_issue28/probe_scaling.sh OUT SECONDS [-- RUN...]
# 1. one discarded warm-up process;
# 2. `vdnnsim profile` of the host-bound models, twice each (two draws of the profiling
#    host), into OUT/NAME_bB_K.yaml;
# 3. `vdnnsim measure --repeat 5` of their baselines (OUT/repeat.jsonl, every process's
#    probes and host times kept);
# 4. RUN... (remeasure.sh's queue, e.g. remeasure_runs_rest.txt from its fifth run) until
#    SECONDS from the start.
# The test, on CPU afterwards: each trace's predicted host-bound time times (the record's
# process's probe / the trace's probe), against that process's time, over loans and draws.
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
# shellcheck source=experiments/h200_issue28/device_env.sh
. "$HERE/device_env.sh"
for k in 1 2; do
  for run in $MODELS; do
    name=${run%%:*}; b=${run##*:}
    t0=$(date +%s)
    python3 -m vdnnsim profile --model "torchvision:$name" --batch "$b" \
      -o "$OUT/${name}_b${b}_$k.yaml" > "$OUT/p.log" 2>&1
    echo "$run draw $k rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/p.log")" \
      >> "$OUT/profile_log.txt"
  done
done
rm -f "$OUT/p.log"
for run in $MODELS; do
  name=${run%%:*}; b=${run##*:}
  python3 -m vdnnsim measure --model "torchvision:$name" --batch "$b" --repeat 5 \
    --warmup-processes 0 --json >> "$OUT/repeat.jsonl" 2>> "$OUT/measure.err"
done
[ $# -gt 0 ] && WARMUP=0 bash "$HERE/remeasure.sh" "$OUT/queue" "$@"
