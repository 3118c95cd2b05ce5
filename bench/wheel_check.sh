#!/usr/bin/env bash
# The installed wheel, not the source tree: run from an empty folder outside the checkout,
# with a virtual environment that holds the built wheel (make wheel-check makes it), each
# command must succeed and print what the development install prints.
#   bash bench/wheel_check.sh WHEEL_VENV REFERENCE_VDNNSIM
set -euo pipefail
venv=$(cd "$1" && pwd)
ref=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
away=$(mktemp -d)
trap 'rm -rf "$away"' EXIT
cd "$away"
where=$("$venv/bin/python" -c 'import vdnnsim.engine.sim, pathlib; print(pathlib.Path(vdnnsim.__file__).resolve())')
case "$where" in
  "$venv"/*) ;;
  *) echo "wheel-check: vdnnsim was imported from $where, not from the wheel in $venv"; exit 1 ;;
esac
for cmd in "list" "run $root/configs/demo.yaml" "reproduce"; do
  # shellcheck disable=SC2086
  "$venv/bin/vdnnsim" $cmd > got.txt
  # shellcheck disable=SC2086
  "$ref" $cmd > want.txt
  if ! cmp -s got.txt want.txt; then
    echo "wheel-check: 'vdnnsim $cmd' from the wheel differs from the development install:"
    diff want.txt got.txt | head -20
    exit 1
  fi
  echo "wheel-check: vdnnsim $cmd: $(wc -l < got.txt) lines, as the development install prints"
done
