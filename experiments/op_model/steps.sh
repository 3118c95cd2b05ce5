#!/usr/bin/env bash
# GPU (any lent machine; .whl carried). Session 31: issue 29's device steps by name, in the
# order given, each skipped (and said so) when less time is left before DEADLINE (epoch s)
# than its estimate, so a call ends inside its limit with what it finished:
#   DEADLINE=$(( $(date +%s) + 560 )) bash experiments/op_model/steps.sh OUT STEP...
# STEP: warmup (one discarded measure process), host (vdnnsim calibrate --ops --host-only,
# with the mixed chains, NOTE [host mixes]), norms_bf16 / norms_fp32 / cnn_bf16 / cnn_fp32
# (the norms and CNN grids, grid 2, scale 0.6, NOTE [op calibration]), transformer_bf16 /
# transformer_fp32 (the transformer grid, scale 1), m:RUN (RUN of the
# held-out set named by SET, default the first, measured with --repeat 3 by collect.sh).
# Everything lands in /tmp/s31work/W (W = the GPU's short name); OUT/W.tgz is remade after
# every step. The caller chooses the steps by the GPU it got (an H200's calibration is the
# H200's own; another card's runs test the spec rule, NOTE [op spec rule]).
set -u
OUT=$1; shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEADLINE=${DEADLINE:-$(( $(date +%s) + 560 ))}
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$G" in *H200*) W=h200 ;; *H100*) W=h100 ;; *) W=gpu ;; esac
echo "GPU: $G"
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$ROOT"/.whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1
D=/tmp/s31work/$W
mkdir -p "$D/cal"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$D/gpu.txt"
[ -f "$D/lscpu.txt" ] || lscpu > "$D/lscpu.txt" 2>&1
pack() { tar czf "$OUT/$W.tgz.part" -C /tmp/s31work "$W" && mv "$OUT/$W.tgz.part" "$OUT/$W.tgz"; }
C="bash $ROOT/experiments/op_model/collect.sh"
est() {  # seconds a step is expected to take (session 15 and 28 calls)
  case $1 in
    warmup) echo 30 ;; host) echo 60 ;; norms_*) echo 90 ;; cnn_*) echo 300 ;; transformer_*) echo 80 ;;
    m:qwen3*|m:phi*|m:olmo*) echo 110 ;; m:*) echo 75 ;; *) echo 60 ;;
  esac
}
for step in "$@"; do
  left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -lt "$(est "$step")" ]; then echo "$step skipped: ${left} s left"; continue; fi
  t0=$(date +%s)
  case $step in
    warmup) $C "$D" warmup; rc=$? ;;
    host) n=$(ls "$D"/cal/host_*.json 2>/dev/null | wc -l)
      python3 -m vdnnsim calibrate --ops --host-only -o "$D/cal/host_$((n + 1)).json" \
        2> "$D/cal/host_$((n + 1)).log"; rc=$? ;;
    norms_*|cnn_*|transformer_*) c=${step%_*}; dt=${step#*_}; sc=0.6
      [ "$c" = transformer ] && sc=1  # the shipped transformer files' scale
      python3 -m vdnnsim calibrate --ops --classes "$c" --scale "$sc" --dtype "$dt" \
        -o "$D/cal/${W}_ops_${c}_${dt}.json" 2> "$D/cal/${c}_${dt}.log"; rc=$? ;;
    m:*) $C "$D" measure "${step#m:}"; rc=$? ;;
    *) echo "no step $step"; rc=2 ;;
  esac
  echo "$step rc $rc $(( $(date +%s) - t0 )) s"
  pack
done
