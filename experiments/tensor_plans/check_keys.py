"""Each tensor plan of DIR/plans (make_plans.py) against its model as the tensor runtime will
find it, on the CPU before any GPU runs it (NOTE [tensor runtime]): the model built on the
meta device as the plan names it (model, batch, dtype, sequence length, input, arguments),
its step probed with the plan's modules checkpointed, every checkpointed module a module of
the model and every offloaded buffer's key found in the pack log. Prints one line a plan:
`ok` with its counts, or the runtime's one-line refusal.

    python experiments/tensor_plans/check_keys.py [DIR]      (default traces/h200_tensor_plans)
"""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's vdnnsim and experiments, from any folder

from vdnnsim.gpu.probe.aten import probe_workload  # noqa: E402
from vdnnsim.gpu.runtime.tensors import check_keys  # noqa: E402
from vdnnsim.planners.planfile import read_plan_file  # noqa: E402


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "traces" / "h200_tensor_plans"
    refused = 0
    for path in sorted((folder / "plans").glob("*-tensors.yaml")):
        plan = read_plan_file(path)
        try:
            with redirect_stderr(io.StringIO()):  # transformers' notes about its configs
                work, probe = probe_workload(plan.model, plan.batch_size, plan.dtype,
                                             plan.seq_len, plan.model_args or {}, plan.input,
                                             plan.recompute_modules, as_cuda=True)
            for m in plan.recompute_modules:
                work.model.get_submodule(m)
            check_keys(plan, probe, f"{plan.model}'s step")
            print(f"{path.name}: ok, {len(plan.tensors)} offloaded, "
                  f"{len(plan.recompute_modules)} checkpointed")
        except (ValueError, AttributeError) as exc:
            refused += 1
            print(f"{path.name}: refused: {exc}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
