#!/usr/bin/env bash
# On the H200, with simpy and pydantic importable (traces/h200_timm_heldout/README.md; OUT relative
# to the working directory):
#   bash experiments/validation/timm_collect.sh OUT measure [ROUNDS] [MODEL ...]
#   bash experiments/validation/timm_collect.sh OUT profile [MODEL ...]
# measure: one discarded process (OUT/warmup.json), then ROUNDS (default 3) rounds of one
# fresh `vdnnsim measure` process per model, appended to OUT/measure.jsonl; profile: one
# `vdnnsim profile --no-check` per model into OUT/NAME.yaml.gz (its check's verdict, if it
# failed, is in the trace's note and its log).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)  # the repository: its vdnnsim, its traces/
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT=$1
WHAT=$2
shift 2
ALL="dla34 cspresnet50 res2net50_26w_4s rexnet_100 hrnet_w18_small poolformer_s12"
spec() { echo "--model timm:create_model --model-arg model_name=$1 --input image:3,224,224 --batch 64"; }
case $WHAT in
  measure)
    ROUNDS=${1:-3}
    [ $# -gt 0 ] && shift
    MODELS=${*:-$ALL}
    # shellcheck disable=SC2046
    python3 -m vdnnsim measure $(spec dla34) --json > "$OUT/warmup.json" 2> "$OUT/warmup.err"
    for round in $(seq 1 "$ROUNDS"); do
      for m in $MODELS; do
        # shellcheck disable=SC2046
        if python3 -m vdnnsim measure $(spec "$m") --json > "$OUT/m.json" 2> "$OUT/m.err"; then
          python3 -c "import json,sys; r=json.load(open(sys.argv[1])); r.update(model='$m', round=$round); print(json.dumps(r))" "$OUT/m.json" >> "$OUT/measure.jsonl"
        else
          echo "{\"model\": \"$m\", \"round\": $round, \"error\": $(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()[-400:]))' "$OUT/m.err")}" >> "$OUT/measure.jsonl"
        fi
      done
    done
    rm -f "$OUT/m.json" "$OUT/m.err" ;;
  profile)
    MODELS=${*:-$ALL}
    for m in $MODELS; do
      # shellcheck disable=SC2046
      python3 -m vdnnsim profile $(spec "$m") --no-check -o "$OUT/$m.yaml.gz" > "$OUT/$m.log" 2>&1
      echo "$m rc=$?" >> "$OUT/profile.txt"
    done ;;
esac
