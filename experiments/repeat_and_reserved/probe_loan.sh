#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28, session 20: does NOTE [host probe] tell two
# loans' hosts apart by as much as their host-bound steps differ? On each loan (a fresh
# machine per device call):
#   bash experiments/repeat_and_reserved/probe_loan.sh OUT SECONDS [profile] [-- RUN...]
# 1. one discarded warm-up process (the first process on a fresh machine runs ~30% slow);
# 2. with `profile`: `vdnnsim profile` of the host-bound PROBE_RUNS' models into
#    OUT/NAME_bB.yaml (the trace's source carries this host's host_probe_ns);
# 3. `vdnnsim measure --repeat 3` of PROBE_RUNS (each record carries host_probe_ns and its
#    band), then RUN... (remeasure.sh's queue) until SECONDS from the start have passed.
# Records: OUT/repeat.jsonl (remeasure.sh's format); OUT/log.txt; OUT/profile_log.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: probe_loan.sh OUT SECONDS [profile] [-- RUN...]}
SECONDS_LEFT=${2:?usage: probe_loan.sh OUT SECONDS [profile] [-- RUN...]}
shift 2
export DEADLINE=$(( $(date +%s) + SECONDS_LEFT ))
PROFILE=0
if [ "${1:-}" = profile ]; then PROFILE=1; shift; fi
[ "${1:-}" = -- ] && shift
PROBE_RUNS="efficientnet_b0:32:baseline shufflenet_v2_x1_0:64:baseline efficientnet_b0:32:vdnn_all"
mkdir -p "$OUT"
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$HERE/device_env.sh"
if [ "$PROFILE" = 1 ]; then
  for run in efficientnet_b0:32 shufflenet_v2_x1_0:64; do
    name=${run%%:*}; b=${run##*:}
    t0=$(date +%s)
    python3 -m vdnnsim profile --model "torchvision:$name" --batch "$b" \
      -o "$OUT/${name}_b$b.yaml" > "$OUT/p.log" 2>&1
    echo "$run rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/p.log")" >> "$OUT/profile_log.txt"
  done
  rm -f "$OUT/p.log"
fi
# shellcheck disable=SC2086
WARMUP=0 bash "$HERE/remeasure.sh" "$OUT" $PROBE_RUNS "$@"
