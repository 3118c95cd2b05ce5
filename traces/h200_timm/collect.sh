#!/usr/bin/env bash
# On the H200, from the repository root, with simpy and pydantic importable (README.md):
#   bash traces/h200_timm/collect.sh OUT measure|profile|profile-blocks
set -u
OUT=$1
WHAT=$2
MODELS="dla34 cspresnet50 res2net50_26w_4s rexnet_100 hrnet_w18_small poolformer_s12"
spec() { echo "--model timm:create_model --model-arg model_name=$1 --input image:3,224,224 --batch 64"; }
case $WHAT in
  measure)
    # shellcheck disable=SC2046
    python3 -m vdnnsim measure $(spec dla34) --json > "$OUT/warmup.json" 2> "$OUT/warmup.err"
    for round in 1 2 3; do
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
  profile|profile-blocks)
    for m in $MODELS; do
      # shellcheck disable=SC2046
      python3 -m vdnnsim profile $(spec "$m") -o "$OUT/$m.yaml.gz" > "$OUT/$m.log" 2>&1
      echo "$m rc=$?" >> "$OUT/profile.txt"
    done ;;
esac
