#!/usr/bin/env bash
# Profile (and with --measure, measure again) every run of a set (profile_all.py), one
# process per model, on the device machine (OUT relative to the working directory):
#   bash experiments/transformers/run_profiles.sh OUT SET [--measure] [SPEC ...]
# (no SPEC: every model of the set). The traces come back as OUT/profiled-SET-N.tgz, N the
# call's first model's index (the device returns few files a call).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$HERE/../..${PYTHONPATH:+:$PYTHONPATH}"
out=$1; set_=$2; shift 2
measure=""
if [ "${1:-}" = "--measure" ]; then measure="--measure"; shift; fi
specs="$*"
if [ -z "$specs" ]; then
  specs=$(python3 -c "
import sys; sys.path.insert(0, '$HERE')
from collect import runs
print(' '.join(dict.fromkeys(r[1] for r in runs('$set_'))))")
fi
for s in $specs; do
  python3 "$HERE/profile_all.py" "$out" "$set_" --only "$s" $measure 2>&1 \
    | grep -v "loss_type=None"
done
tar czf "$out/profiled-$set_-$(date +%s).tgz" -C "$out" profiled && rm -r "$out/profiled"
