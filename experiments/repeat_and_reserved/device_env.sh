# Sourced by the device scripts here (ROOT and OUT set): simpy and pydantic from the
# carried wheels where the machine lacks them, the repository on PYTHONPATH, and one
# discarded warm-up process (the first process on a fresh machine runs ~30% slow) whose
# record goes to OUT/warmup.json, once a machine (/tmp/vdnnsim_warm marks it done).
if ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$ROOT"/.whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# diffusers (diffusers: models, issue 57) from its carried wheel and those of the imports it
# adds to transformers' (requests and its urllib3, charset_normalizer, idna, certifi), where
# the machine lacks it
if ! python3 -c "import diffusers" 2>/dev/null; then
  wheels=$(ls "$ROOT"/.whl/diffusers-*.whl "$ROOT"/.whl/requests-*.whl "$ROOT"/.whl/urllib3-*.whl \
    "$ROOT"/.whl/charset_normalizer-*.whl "$ROOT"/.whl/idna-*.whl "$ROOT"/.whl/certifi-*.whl \
    2>/dev/null)
  if [ -n "$wheels" ] && python3 -m pip install -q --no-index --no-deps --no-compile \
      --target /tmp/site-diffusers $wheels; then
    export PYTHONPATH=/tmp/site-diffusers${PYTHONPATH:+:$PYTHONPATH}
  fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -e /tmp/vdnnsim_warm ]; then  # once a machine: a later call finds it warm
  python3 -m vdnnsim measure --model torchvision:resnet50 --batch 64 --json \
    > "$OUT/warmup.json" 2> /dev/null && touch /tmp/vdnnsim_warm
fi
