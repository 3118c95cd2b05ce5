# Sourced by session 28's device scripts (ROOT and SET set): refuse a GPU that is not an H200 (the
# op calibration and the held-out sets are the H200's), and make simpy and pydantic
# importable from the carried wheels where the machine lacks them.
G=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "GPU: $G"
case "$G" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3 ;; esac
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$ROOT"/.whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
# the repository first on the path, quiet transformers, unbuffered progress lines, and C:
# collect.sh of the set named by SET (the caller's, relative to the repository)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_VERBOSITY=error \
  PYTHONUNBUFFERED=1 SET
C="bash $ROOT/experiments/op_model/collect.sh"
