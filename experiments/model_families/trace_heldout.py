"""Issue 57's held-out model families (heldout.yaml, HELDOUT.md) traced on the CPU: each
model built on the meta device and traced by ``vdnnsim trace`` (h100 preset, AdamW) in
fp32, bf16 and autocast-bf16, one at a time, each in a fresh process.

    python experiments/model_families/trace_heldout.py [--only NAME ...] [--dtype D ...]
        [--write-specs]

Each entry becomes an ``hf:`` spec (``specs/NAME.yaml``: ``name``, ``task`` and
``config``, the config class's ``model_type`` with the entry's ``args``), or for a
``diffusers:CLASS`` entry a ``diffusers:`` spec (``name``, ``class`` and the ``args`` as
its ``config``, the class's defaults for the rest), which ``--write-specs`` writes (the
committed files are checked against them otherwise). The
entry's batch is ``-b``, its ``seq_len`` ``--seq-len``, its ``input`` ``--input`` (the
decoder's tokens of an audio model, "mel:80,3000; tokens:448", are its labels:
``mel:80,3000;labels:448``), its ``lora`` ``--lora r=R,targets=A+B`` (a classifier's head
trainable as well, ``modules_to_save=classifier``: HELDOUT.md's "with a trainable head"),
and positions enough for its tokens (``spec_of``).

Then the step options' cases (steps.yaml, ``step_entries``): a held-out model with
``--micro-batches`` or ``--grad-checkpointing``, in the dtypes the case names. One row per
model and dtype: ``traced`` (the trace replayed eager on the h100 preset:
peak allocated GiB and step ms), ``refused`` (``vdnnsim: error:``'s one line, exit 2) or
``traceback`` (any other end: a defect).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim, from any folder
HERE = Path(__file__).resolve().parent
SPECS = HERE / "specs"
DTYPES = ("fp32", "bf16", "autocast-bf16")
TIMEOUT = 600


def entries() -> list[dict]:
    import yaml
    return yaml.safe_load((HERE / "heldout.yaml").read_text())["models"]


def step_entries() -> list[dict]:
    """The step options' cases (steps.yaml): each its base entry under its own name, with
    the case's batch, flags (``steps``) and dtypes; its model is the base's spec."""
    import yaml
    base = {e["name"]: e for e in entries()}
    out = []
    for c in yaml.safe_load((HERE / "steps.yaml").read_text())["cases"]:
        e = dict(base[c["base"]], name=c["name"], spec=c["base"], steps=list(c["flags"]),
                 dtypes=list(c["dtypes"]))
        e["batch"] = c.get("batch", e["batch"])
        out.append(e)
    return out


def all_entries() -> list[dict]:
    """The held-out list, then the step options' cases."""
    return entries() + step_entries()


def source(e: dict) -> str:
    """The entry's model source: ``diffusers`` for a ``diffusers:CLASS`` config, else
    ``hf``."""
    return "diffusers" if e["config"].startswith("diffusers:") else "hf"


def model_of(e: dict) -> str:
    """``--model`` of an entry: its spec file under its source."""
    return f"{source(e)}:{SPECS / (e.get('spec', e['name']) + '.yaml')}"


def spec_of(e: dict) -> dict:
    """The spec of an entry. A diffusers model's: its class and its args as the config. An
    hf: model's: its config class's model_type, then its args; where the
    entry's tokens outnumber the class's default positions (Longformer's 512 against 2048),
    ``max_position_embeddings`` of the tokens plus RoBERTa's two (its positions start after
    the padding index), as longformer-base-4096's 4098 for 4096 tokens."""
    if source(e) == "diffusers":
        return {"name": e["name"], "class": e["config"].partition(":")[2],
                "config": dict(e["args"])}
    import transformers
    cls = getattr(transformers, e["config"])
    config = {"model_type": cls.model_type, **e["args"]}
    most = getattr(cls(), "max_position_embeddings", None)
    if e.get("seq_len") and most and e["seq_len"] > most \
            and "max_position_embeddings" not in config:
        config["max_position_embeddings"] = e["seq_len"] + 2
    return {"name": e["name"], "task": e["task"], "config": config}


def spec_text(e: dict) -> str:
    import yaml
    article = "an" if source(e) == "hf" else "a"
    return (f"# {e['name']}: heldout.yaml's entry as {article} {source(e)}: spec "
            "(experiments/model_families/trace_heldout.py)\n"
            + yaml.safe_dump(spec_of(e), sort_keys=False, default_flow_style=None, width=100))


def input_of(e: dict) -> str | None:
    """The entry's input as --input: after a mel spectrogram, the decoder's tokens are
    its labels."""
    text = e.get("input")
    if text is None:
        return None
    parts = [p.strip() for p in text.split(";")]
    if parts[0].startswith("mel:"):
        parts = [parts[0]] + [p.replace("tokens:", "labels:", 1) for p in parts[1:]]
    return ";".join(parts)


def lora_of(e: dict) -> str | None:
    lo = e.get("lora")
    if lo is None:
        return None
    text = f"r={lo['r']},targets={'+'.join(lo['target_modules'])}"
    if e["task"] == "sequence_classification":
        text += ",modules_to_save=classifier"
    return text


def workload_flags(e: dict) -> list[str]:
    """The model, batch, tokens, input and adapters of an entry, as trace and measure take
    them."""
    f = ["--model", model_of(e), "-b", str(e["batch"])]
    if e.get("seq_len"):
        f += ["--seq-len", str(e["seq_len"])]
    if input_of(e):
        f += ["--input", input_of(e)]
    if lora_of(e):
        f += ["--lora", lora_of(e)]
    return f + e.get("steps", [])


def command(e: dict, dtype: str, out: str, gpu: str = "h100") -> list[str]:
    return [sys.executable, "-m", "vdnnsim", "trace", *workload_flags(e), "--gpu", gpu,
            "--dtype", dtype, "--optimizer", "adamw", "-o", out]


def one(e: dict, dtype: str, gpu: str = "h100") -> dict:
    """Trace one model in one dtype in a fresh process (for the ``gpu`` preset); replay it
    if it traced."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace.yaml")
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get(
            "PYTHONPATH", ""))
        t0 = time.time()
        try:
            p = subprocess.run(command(e, dtype, out, gpu), capture_output=True, text=True,
                               timeout=TIMEOUT, env=env)
        except subprocess.TimeoutExpired:
            return {"outcome": "timeout", "message": f"over {TIMEOUT} s", "s": TIMEOUT}
        s = time.time() - t0
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        if p.returncode == 0:
            from vdnnsim.api import resolve_gpu, run_trace
            from vdnnsim.trace import load_trace
            trace = load_trace(out)
            r = run_trace(trace, resolve_gpu(gpu), "eager", record=False)
            note = trace.source.note or ""
            return {"outcome": "traced", "peak": r.peak_memory_bytes / 2**30,
                    "ms": r.iteration_time_ns / 1e6, "s": s, "note": note}
        error = [x for x in lines if x.startswith("vdnnsim: error: ")]
        if p.returncode == 2 and error and "Traceback" not in p.stderr:
            return {"outcome": "refused", "message": error[-1][len("vdnnsim: error: "):],
                    "s": s}
        return {"outcome": "traceback", "message": lines[-1] if lines else f"exit {p.returncode}",
                "s": s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--dtype", nargs="+", choices=DTYPES, default=list(DTYPES))
    ap.add_argument("--write-specs", action="store_true",
                    help="write specs/NAME.yaml from heldout.yaml")
    ap.add_argument("--notes", action="store_true", help="print each trace's note too")
    args = ap.parse_args(argv)
    todo = [e for e in all_entries() if not args.only or e["name"] in args.only]
    SPECS.mkdir(exist_ok=True)
    for e in todo:
        if "spec" in e:  # a step options' case: its base's spec
            continue
        path, text = SPECS / f"{e['name']}.yaml", spec_text(e)
        if args.write_specs:
            path.write_text(text)
        elif not path.is_file() or path.read_text() != text:
            sys.exit(f"{path.relative_to(ROOT)} differs from heldout.yaml's entry: "
                     "run with --write-specs")
    print("| model | family | dtype | outcome | peak GiB | step ms | s | message |")
    print("|---|---|---|---|---|---|---|---|")
    notes = []
    for e in todo:
        for dtype in [d for d in args.dtype if d in e.get("dtypes", DTYPES)]:
            r = one(e, dtype)
            peak = f"{r['peak']:.2f}" if "peak" in r else ""
            ms = f"{r['ms']:.1f}" if "ms" in r else ""
            msg = r.get("message", "").replace("|", "/")
            print(f"| {e['name']} | {e['family']} | {dtype} | {r['outcome']} | {peak} "
                  f"| {ms} | {r['s']:.0f} | {msg} |", flush=True)
            if r.get("note"):
                notes.append(f"{e['name']} {dtype}: {r['note']}")
    if args.notes:
        print()
        for n in notes:
            print(f"- {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
