"""What the commands share: argument readers and the checks made before work starts.

The command modules import the library inside each command, not at their top: `vdnnsim
--help`, a usage error and Ctrl-C while parsing then load neither torch, pandas nor the
engine (nor pydantic and yaml), so they answer at once.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from ..errors import ConfigError
from ..units import GiB

EXIT_USAGE = 2  # a user's error: one line on stderr
EXIT_BUG = 3  # the simulator broke its own rules (an invariant): a bug report
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C

def shown(path: Any) -> str:
    from ..yamlio import shown
    return shown(path)


def json_default(o: Any) -> Any:
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def clean(record: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}


def size_arg(flag: str, value: str | None, required: bool = False) -> int | None:
    """A byte count given on the command line ('12 GiB'), or a one-line error naming it;
    None where not given (or given empty, unless ``required``)."""
    if value is None or not (value or required):
        return None
    from ..hardware import _capacity
    try:
        return _capacity(value)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def writable(path: Any, folder: bool = False) -> None:
    """-o/--output checked before the work that fills it (yamlio.check_writable)."""
    if path and path != "-":
        from ..yamlio import check_writable
        check_writable(path, folder)


def host_cal_arg(args: argparse.Namespace) -> Any:
    """``--host-cal FILE`` read and checked before any work (hostcal.py); None where not
    given."""
    if getattr(args, "host_cal", None) is None:
        return None
    from ..hostcal import read_host_calibration
    return read_host_calibration(args.host_cal)


def need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError("this command needs PyTorch: pip install 'vdnnsim[torch]'") from None


def model_kwargs(pairs: list[str] | None) -> dict:
    """``--model-arg KEY=VALUE`` (repeatable), VALUE read as YAML."""
    import yaml

    out = {}
    for p in pairs or []:
        key, eq, value = p.partition("=")
        if not eq or not key.strip().isidentifier():
            raise ConfigError(f"--model-arg {p!r}: use KEY=VALUE (a keyword of the model's "
                              "factory or config)")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--model-arg {p!r}: the value is not a YAML scalar") from None
    return out


def memory_cap(args: argparse.Namespace) -> int | None:
    """``--memory-cap SIZE`` in bytes (the byte-size parser's: '12GiB', '12.5GB', '1e9'),
    or the deprecated ``--memory-cap-gb G``, which has always meant GiB."""
    if args.memory_cap_gb is None:
        return size_arg("--memory-cap", args.memory_cap)
    if args.memory_cap is not None:
        raise ConfigError("give --memory-cap, not both it and the deprecated --memory-cap-gb")
    print(f"vdnnsim: warning: --memory-cap-gb is deprecated and means GiB: use --memory-cap "
          f"'{args.memory_cap_gb:g} GiB'", file=sys.stderr)
    return int(args.memory_cap_gb * GiB)


def workload_args(p: argparse.ArgumentParser) -> None:
    """What builds a model beside its spec (trace, profile, measure: the
    same flags, so that a model traced without a GPU is the one profiled and measured)."""
    p.add_argument("--model-arg", action="append", default=None, metavar="KEY=VALUE",
                   help="a keyword argument of the factory, or a config key of an hf: or "
                   "diffusers: model (repeatable)")
    p.add_argument("--input", default=None, help="a factory's input: image:C,H,W[:CLASSES] "
                   "or tokens:SEQ:VOCAB; an hf: encoder-decoder's: tokens:N;labels:M or "
                   "mel:BINS,FRAMES;labels:M; a diffusers: model's: latents:C,H,W;text:SEQ[,DIM]")
    p.add_argument("--seq-len", type=int, default=None,
                   help="sequence length of an hf: language model (default: up to 512)")
    p.add_argument("--lora", default=None, metavar="KEY=VALUE,...",
                   help="fine-tune an hf: model with PEFT's LoRA adapters, its base frozen: "
                   "r=16,alpha=32,targets=q_proj+v_proj[,dropout=P][,bias=none|all|lora_only]"
                   "[,modules_to_save=NAME+NAME] (targets left out: PEFT's default for the "
                   "model type)")
    p.add_argument("--micro-batches", default=None, metavar="N",
                   help="gradient accumulation: a step of N forward and backward passes of "
                   "--batch-size samples each (the micro-batch), then one optimizer step")
    p.add_argument("--grad-checkpointing", action="store_true",
                   help="the model's own gradient checkpointing (hf: and diffusers: models; "
                   "transformers' non-reentrant checkpoint of each layer)")


def fold_routing(args: argparse.Namespace) -> None:
    """``vdnnsim trace --routing LOAD`` checked and put into ``args.model_arg`` as
    ``routing``, the form the trace's note and a plan file carry (NOTE [moe load])."""
    if args.routing is None:
        return
    from ..gpu.probe.moe import parse_routing
    if not args.model:
        raise ConfigError("--routing goes with --model (a mixture-of-experts model)")
    if any(a.partition("=")[0].strip() == "routing" for a in args.model_arg or []):
        raise ConfigError("give --routing or --model-arg routing=..., not both")
    args.model_arg = list(args.model_arg or []) + [f"routing={parse_routing(args.routing)}"]
    args.routing = None


def fold_step_options(args: argparse.Namespace) -> None:
    """``--micro-batches N`` and ``--grad-checkpointing`` checked and put into
    ``args.model_arg`` as the model arguments that carry them (NOTE [step options])."""
    from ..gpu.model.stepoptions import CHECKPOINTING, MICRO, micro_batches
    given = {a.partition("=")[0].strip() for a in args.model_arg or []}
    folded = []
    if args.micro_batches is not None:
        n = micro_batches(args.micro_batches)
        if MICRO in given:
            raise ConfigError(f"give --micro-batches or --model-arg {MICRO}=..., not both")
        if n > 1:  # one is a plain step: nothing to carry
            folded.append(f"{MICRO}={n}")
    if args.grad_checkpointing:
        if CHECKPOINTING in given:
            raise ConfigError(f"give --grad-checkpointing or --model-arg {CHECKPOINTING}=..., "
                              "not both")
        folded.append(f"{CHECKPOINTING}=true")
    if folded:
        args.model_arg = list(args.model_arg or []) + folded
    args.micro_batches, args.grad_checkpointing = None, False


def fold_lora(args: argparse.Namespace) -> None:
    """``--lora SETTINGS`` checked and put into ``args.model_arg`` as the model argument
    ``lora`` (NOTE [lora]): the form a trace's note, a plan file and a child process of
    ``measure --repeat`` carry it in."""
    if args.lora is None:
        return
    from ..gpu.model.lora import KEY, canonical
    model = getattr(args, "model", None)
    if model is not None and not model.startswith("hf:"):
        raise ConfigError(f"--lora goes with hf: models, not {model}")
    if any(a.partition("=")[0].strip() == KEY for a in args.model_arg or []):
        raise ConfigError(f"give --lora or --model-arg {KEY}=..., not both")
    args.model_arg = list(args.model_arg or []) + [f"{KEY}={canonical(args.lora)}"]
    args.lora = None


