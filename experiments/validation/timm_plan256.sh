#!/usr/bin/env bash
# On the H200, with simpy and pydantic importable (traces/h200_timm_heldout/README.md; OUT relative
# to the working directory):
#   bash experiments/validation/timm_plan256.sh OUT [MODEL]
# Issue 26's planned run: a held-out factory CNN (default cspresnet50) at batch 256, which
# needs about 21 GiB as it is, planned for a 12 GiB cap and run there. One discarded
# `vdnnsim measure` process first (the first process after a machine starts runs slow),
# then: `vdnnsim profile` at batch 256 (OUT/MODEL.b256.yaml.gz), `vdnnsim plan` of it under
# 12 GiB (OUT/plan.yaml: blocks by module path, NOTE [blocks]), three fresh processes of
# `vdnnsim measure --plan` under the 12 GiB cap (OUT/planned.jsonl), and the step as it is
# under the same cap (OUT/baseline_cap.json: it should not fit).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)  # the repository: its vdnnsim, its traces/
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT=$1
M=${2:-cspresnet50}
spec="--model timm:create_model --model-arg model_name=$M --input image:3,224,224"
# shellcheck disable=SC2086
python3 -m vdnnsim measure $spec --batch 64 --json > "$OUT/warmup.json" 2> "$OUT/warmup.err"
# shellcheck disable=SC2086
python3 -m vdnnsim profile $spec --batch 256 -o "$OUT/$M.b256.yaml.gz" > "$OUT/profile.log" 2>&1 \
  || python3 -m vdnnsim profile $spec --batch 256 --no-check -o "$OUT/$M.b256.yaml.gz" \
     >> "$OUT/profile.log" 2>&1
printf 'network: %s.b256.yaml.gz\ngpu: h200\n' "$M" > "$OUT/run.yaml"
python3 -m vdnnsim plan "$OUT/run.yaml" --budget 12GiB -o "$OUT/plan.yaml" > "$OUT/plan.log" 2>&1
for round in 1 2 3; do
  # shellcheck disable=SC2086
  python3 -m vdnnsim measure $spec --batch 256 --plan "$OUT/plan.yaml" --memory-cap-gb 12 \
    --json > "$OUT/m.json" 2> "$OUT/planned$round.err" && \
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); r['round']=$round; print(json.dumps(r))" \
      "$OUT/m.json" >> "$OUT/planned.jsonl"
done
# shellcheck disable=SC2086
python3 -m vdnnsim measure $spec --batch 256 --memory-cap-gb 12 --json \
  > "$OUT/baseline_cap.json" 2> "$OUT/baseline_cap.err"
rm -f "$OUT/m.json"
