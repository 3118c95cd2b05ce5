#!/usr/bin/env bash
# GPU (the H200 device machine). Issue 28, step 0 of probe_scaling.sh (written in session
# 20, this script in session 21 before it ran): does the host probe after each timed step
# (NOTE [host probe]) move the steps it sits between? `vdnnsim measure --repeat 5` of
# EfficientNet-B0 (32), host-bound, with the probe (A) and with --no-step-probe (B), in the
# order given, one record a line in OUT/ab.jsonl (arm, order, the record):
#   bash experiments/repeat_and_reserved/probe_ab.sh OUT AB|BA
# Judged on CPU afterwards: the arms' per-process host issue times (host_issue_ms) and
# step medians pooled over every loan's file; the probe passes if the arms' medians differ
# by less than either arm's band (max - min over its processes).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: probe_ab.sh OUT AB|BA}
ORDER=${2:?usage: probe_ab.sh OUT AB|BA}
mkdir -p "$OUT"
# shellcheck source=experiments/repeat_and_reserved/device_env.sh
. "$HERE/device_env.sh"
i=0
for arm in $(echo "$ORDER" | fold -w1); do
  i=$((i + 1))
  flag=""
  [ "$arm" = B ] && flag=--no-step-probe
  t0=$(date +%s)
  # shellcheck disable=SC2086
  python3 -m vdnnsim measure --model torchvision:efficientnet_b0 --batch 32 --repeat 5 \
    --warmup-processes 0 $flag --json > "$OUT/ab.json" 2> "$OUT/ab.err"
  rc=$?
  python3 - "$OUT/ab.json" "$OUT/ab.err" "$arm" "$i" "$rc" >> "$OUT/ab.jsonl" <<'PY'
import json, sys
path, err, arm, order, rc = sys.argv[1:6]
try:
    rec = json.load(open(path))
except (OSError, ValueError):
    rec = {"error": open(err).read()[-400:]}
rec.update(arm=arm, order=int(order), rc=int(rc))
print(json.dumps(rec))
PY
  echo "[$(date +%T)] arm $arm rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/ab_log.txt"
done
rm -f "$OUT/ab.json" "$OUT/ab.err"
