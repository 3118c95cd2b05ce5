"""NOTE [block mix]: where offloading the first blocks and checkpointing the ones after
them beats both pure block plans, predicted (no GPU run yet): three models the op probe
traces on the meta device and the H200's op model times, each under a budget below its
step's peak. For each: the step without a cap, the fewest offloaded blocks that fit and their step, the fewest
checkpointed, and the plan ``vdnnsim plan`` chooses (offloaded / checkpointed after them).
The traces are taken without their convolutions' predicted workspaces (NOTE [conv
workspaces]): the question is the feature maps', and with them VGG-16's first
convolutions' workspaces set every plan's peak (``vdnnsim plan`` then plans without them).

    .venv/bin/python experiments/beyond_vdnn/block_mix.py
"""

from __future__ import annotations

from vdnnsim.api import resolve_gpu, run_trace
from vdnnsim.costs.workspaces import without_workspaces
from vdnnsim.gpu.probe.aten import memory_trace
from vdnnsim.planners.blocks import plan_blocks
from vdnnsim.trace import trace_from_dict
from vdnnsim.trace.optimizer import with_optimizer

GiB = 2**30
CASES = (  # name, what vdnnsim trace --model is given (model, batch, dtype, sequence
    # length, input, optimizer), the budget as a share of the step's peak
    ("VGG-16 (32), fp32", ("torchvision.models:vgg16", 32, "fp32", None, "image:3,224,224",
                           "sgd"), 0.8),
    ("VGG-16 (32), fp32", ("torchvision.models:vgg16", 32, "fp32", None, "image:3,224,224",
                           "sgd"), 0.85),
    ("ResNet-50 (256), fp32", ("torchvision.models:resnet50", 256, "fp32", None,
                               "image:3,224,224", "sgd"), 0.5),
    ("Llama 1B (4 x 2048), bf16", ("hf:llama-1b", 4, "autocast-bf16", 2048, None, "adamw"),
     0.6),
)


def traced(gpu, model: str, batch: int, dtype: str, seq_len: int | None,
           input_spec: str | None, optimizer: str):
    """What ``vdnnsim trace --model MODEL ...`` writes for ``gpu``, made in this process,
    without its predicted workspaces."""
    trace = trace_from_dict(memory_trace(model, batch, gpu, dtype, seq_len, {}, input_spec),
                            model)
    trace = without_workspaces(trace)
    return with_optimizer(trace, optimizer) if optimizer != "sgd" else trace


def fewest(tried):
    ok = [(k, ns) for k, fits, _, ns in tried if fits]
    return f"{ok[0][0]:2d} at {ok[0][1] / 1e6:6.1f} ms" if ok else "does not fit"


def main() -> int:
    gpu = resolve_gpu("h200")
    print(f"{'H200, op model':26s} {'step':>8s} {'budget':>9s}  {'offloaded alone':15s}  "
          f"{'checkpointed alone':18s}  plan (offloaded / checkpointed)")
    for name, args, share in CASES:
        trace = traced(gpu, *args)
        eager = run_trace(trace, gpu, "eager", record=False)
        peak = eager.peak_memory_bytes
        p = plan_blocks(trace, gpu, int(share * peak))
        pure = [ns for _, ok, _, ns in p.tried + p.tried_recompute if ok]
        gain = f", {min(pure) / p.iteration_time_ns:.2f}x faster" if pure and \
            p.blocks and p.recompute else ""
        plan = (f"{p.blocks} / {p.recompute} at {p.iteration_time_ns / 1e6:.1f} ms{gain}"
                if p.fits else "none fits")
        print(f"{name:26s} {eager.iteration_time_ns / 1e6:5.1f} ms {share * peak / GiB:5.2f} "
              f"GiB  {fewest(p.tried):15s}  {fewest(p.tried_recompute):18s}  {plan}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
