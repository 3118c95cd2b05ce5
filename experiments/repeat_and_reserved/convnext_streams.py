"""GPU. Issue 28, NOTE [kernel counts]: ConvNeXt-T's commands per layer counted as the
profile counts them (every launch its host threads make) and as the compute stream's
launch queue holds them (only those whose kernels ran on the step's compute stream; cuDNN's
FFT engines fork work onto their own streams). Prints, per batch size, the layers whose
two counts differ or exceed 50, and the step's GPU activities per stream:

    python3 experiments/repeat_and_reserved/convnext_streams.py [BATCH...] > OUT/streams.json
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import torch

from vdnnsim.gpu.profile import kernels
from vdnnsim.gpu.probe.fx import probe
from vdnnsim.gpu.model.build import build_model
from vdnnsim.gpu.profile.layers import DTYPES


def main() -> int:
    torch.backends.cudnn.benchmark = True
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for b in [int(a) for a in sys.argv[1:]] or [64, 128]:
        model, shape, name = build_model("torchvision:convnext_tiny")
        p = probe(model, shape, b, "cuda", DTYPES["fp32"], name)
        seen = {}
        real = kernels.split_commands

        def spy(events, names, left_out=None):
            seen["events"], seen["names"] = events, names
            return real(events, names, left_out)

        kernels.split_commands = spy
        try:
            stream_counts, _ = kernels.count_kernels(model, p)
        finally:
            kernels.split_commands = real
        events = seen["events"]
        legacy = real([e for e in events if e.get("cat") not in kernels._GPU_CATS],
                      seen["names"])[0]
        per_stream = Counter(str((e.get("args") or {}).get("stream")) for e in events
                             if e.get("ph") == "X" and e.get("cat") in kernels._GPU_CATS)
        rows = {k: {"all_launches": legacy[k], "compute_stream": stream_counts[k]}
                for k in stream_counts
                if legacy[k] != stream_counts[k] or max(legacy[k]) > 50}
        out[f"b{b}"] = {"layers": rows, "per_stream": dict(per_stream),
                        "total_all": [sum(v[i] for v in legacy.values()) for i in (0, 1)],
                        "total_compute": [sum(v[i] for v in stream_counts.values())
                                          for i in (0, 1)]}
        print(b, json.dumps(out[f"b{b}"])[:1500], file=sys.stderr, flush=True)
        del model
        torch.cuda.empty_cache()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
