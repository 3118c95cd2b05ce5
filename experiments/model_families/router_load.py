"""How far a random-weight router's real load is from the balanced routing the meta
trace assumes (NOTE [moe routing]): each MoE model of heldout.yaml built as ``vdnnsim
measure`` builds it (random initial weights), one forward pass of the batch measure's
first step takes (its seed-0 random tokens), the router's logits of every layer, each
token's top-k experts counted.

    python experiments/model_families/router_load.py OUT.json [--device cuda] [--dtype D]

Per model and layer: the tokens each expert got over the balanced share T k / E; the
record keeps the largest and smallest of these over the experts, their coefficient of
variation, and the capacity factor a capped router would need to drop no token (the
largest share). Runs on the CPU as well (the same numbers: the weights and tokens are
seeded; on the GPU kernels' rounding may flip near ties).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from trace_heldout import SPECS, entries  # noqa: E402

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def top_k(config) -> int:
    for key in ("num_experts_per_tok", "moe_topk", "top_k"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    raise ValueError(f"{type(config).__name__}: no top-k in its config")


def load(e: dict, device: str, dtype: str) -> dict:
    import torch
    from vdnnsim.gpu.model.workload import build_workload
    torch.manual_seed(0)
    wl = build_workload(f"hf:{SPECS / (e['name'] + '.yaml')}", seq_len=e.get("seq_len"))
    model = wl.model.to(device, getattr(torch, DTYPES[dtype])).eval()
    batch = wl.batch(e["batch"], device)
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], output_router_logits=True)
    logits = [x for x in out.router_logits if x is not None]
    if not logits:
        raise RuntimeError(f"{e['name']}: the model returned no router logits")
    k = top_k(model.config)
    layers = []
    for x in logits:
        x = x.reshape(-1, x.shape[-1]).float()
        tokens, experts = x.shape
        counts = torch.bincount(x.topk(k, dim=-1).indices.reshape(-1), minlength=experts)
        share = (counts.double() / (tokens * k / experts)).tolist()
        layers.append({"max": max(share), "min": min(share),
                       "cv": statistics.pstdev(share) / statistics.fmean(share)})
    return {"name": e["name"], "dtype": dtype, "device": str(device), "tokens": tokens,
            "experts": experts, "k": k, "layers": layers,
            "capacity_factor": max(r["max"] for r in layers),
            "median_layer_max": statistics.median(r["max"] for r in layers)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", nargs="+", choices=DTYPES, default=["bf16", "fp32"])
    ap.add_argument("--only", nargs="+", metavar="NAME")
    args = ap.parse_args(argv)
    rows = []
    for e in entries():
        if e.get("family") != "moe" or (args.only and e["name"] not in args.only):
            continue
        for d in args.dtype:
            r = load(e, args.device, d)
            rows.append(r)
            print(f"{r['name']} {d}: {r['experts']} experts top-{r['k']}, {r['tokens']} tokens;"
                  f" busiest expert {r['capacity_factor']:.2f}x the balanced share (median "
                  f"layer {r['median_layer_max']:.2f}x)", flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
