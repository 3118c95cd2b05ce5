"""One trace, any GPU: an op trace's times made again for another GPU (``retime``).

NOTE [retime]
An op probe's trace keeps what its op model read: each layer's op features (``attrs.op``,
NOTE [op features]; none on a view) and its place among the ops the host dispatched
(``attrs.seq``); ``source.retime`` the step's precision (``variant``), the trainable
parameters' bytes and tensors, and the GPU's cuBLAS workspaces in ``resident_bytes``.
``retime(trace, gpu)`` runs time_probe over them with ``gpu``'s op model (calibrated, else
the spec rule), and swaps the workspaces: the trace tracing for ``gpu`` gives. A profiled
trace's measured times are carried by the ratio of the op model's times for the two GPUs,
layer by layer (host times and memory as measured), and the trace says so. A run on a GPU
not its trace's re-times a timed trace that can be (api.build_trace); one that cannot, or
a memory-only one, runs with its times as recorded, as before.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from ..errors import ConfigError
from ..trace.model import Algo, Source, Trace
from .ops import MODEL, SPEC_MODEL

PREFIX = "times re-timed for"  # a run's note (api): one line, what re-timed them


def retimable(trace: Trace) -> bool:
    """Whether ``trace`` keeps what re-timing needs (NOTE [retime])."""
    return bool(trace.source.retime) and trace.source.kind in ("synthesized", "profiled") \
        and all("seq" in x.attrs for x in trace.layers)


def _gpu_key(gpu: Any) -> tuple:
    return (gpu.name, tuple(sorted(gpu.peak_flops.items())), gpu.mem_bw_bytes_per_s,
            gpu.sm_count, gpu.op_calibration)


def retime(trace: Trace, gpu: Any) -> Trace:
    """``trace``'s times for ``gpu`` by the op-level model (NOTE [retime]); kept per trace
    and GPU (its name and specs) for the trace's life. A trace without its op features, or
    a GPU without an op model, is a one-line error."""
    from ..hardware import GPU
    if not isinstance(trace, Trace):
        raise ConfigError(f"retime needs a vdnnsim.Trace, got {type(trace).__name__}")
    if not isinstance(gpu, GPU):
        raise ConfigError(f"retime needs a vdnnsim.GPU, got {type(gpu).__name__}")
    if not retimable(trace):
        raise ConfigError(
            f"{trace.name}: the trace keeps no op features to re-time it by (made by an older "
            f"vdnnsim, or not op by op); trace the model again with --gpu {gpu.name}")
    return trace.memo(("retime", _gpu_key(gpu)), lambda: _retime(trace, gpu))


def _model(gpu: Any, what: str) -> Any:
    from ..gpu.probe.aten import op_model_for
    om = op_model_for(gpu)
    if om is None:
        raise ConfigError(f"{what}: {gpu.name} has no op model to time it by (no op "
                          "calibration, and its SM count, fp32 peak or bandwidth unknown)")
    return om


def _probe(trace: Trace) -> SimpleNamespace:
    """The trace's layers as the probe's nodes, as time_probe reads them."""
    nodes = []
    for x in trace.layers:
        out = trace.tensors[x.outputs[0]] if x.outputs else None
        if out is None or ("op" not in x.attrs and not (out.alias_of and x.kind == "flatten")):
            raise ConfigError(f"{trace.name}: layer {x.id} keeps no op features "
                              "(attrs op); it cannot be re-timed")
        nodes.append(SimpleNamespace(
            name=x.id, kind=x.kind, inputs=list(x.inputs), alias_of=out.alias_of,
            requires_grad=out.requires_grad, out_nbytes=out.size_bytes,
            attrs={"_f": x.attrs.get("op"), "_seq": x.attrs["seq"],
                   "module": x.attrs.get("module")}))
    return SimpleNamespace(nodes=nodes)


def _times(trace: Trace, gpu: Any, om: Any) -> Any:
    from ..gpu.probe.op_times import time_probe
    r = trace.source.retime
    return time_probe(_probe(trace), om, r["param_bytes"], r["param_tensors"], r["variant"])


def _retime(trace: Trace, gpu: Any) -> Trace:
    from ..gpu.probe.op_times import pooled_note
    src = trace.source
    made_for = src.retime.get("made_for") or src.gpu or "another GPU"
    om = _model(gpu, trace.name)
    model = MODEL if gpu.op_calibration else SPEC_MODEL
    how = (f"op-level kernel model fitted to {gpu.op_calibration} ({om.source})"
           if gpu.op_calibration else f"op-level kernel model {om.source}")
    if src.kind == "profiled":
        return _carried(trace, gpu, om, made_for, model, how)
    ot = _times(trace, gpu, om)
    layers = []
    for x in trace.layers:
        f, b = ot.times[x.id][:2]
        a = x.algos[0]
        hf, hb = ot.hosts[x.id]
        kf, kb = ot.kernels[x.id]
        layers.append(replace(x, algos=(replace(a, fwd_ns=f, bwd_ns=b),) + x.algos[1:],
                              host_fwd_ns=hf, host_bwd_ns=hb, kernels_fwd=kf,
                              kernels_bwd=kb))
    steps = ot.steps.get(trace.optimizer, [ot.step_ns, ot.host_step_ns])
    matmul = any(x.kind in ("mm", "addmm", "bmm", "baddbmm") for x in trace.layers)
    ws = gpu.cublas_workspace_bytes if matmul else 0  # the GPU's, as tracing for it counts
    note = (f"re-timed for {gpu.name} from a trace made for {made_for}: meta device, {how}"
            + pooled_note(ot.pooled) + _made(src, made_for))
    resident = trace.resident_bytes - src.retime.get("workspace_bytes", 0) + ws
    adds = ot.accumulate if trace.micro_batches > 1 else [0, 0]  # the adds, re-timed
    return replace(trace, layers=tuple(layers), step_ns=steps[0], host_step_ns=steps[1],
                   optimizer_steps=tuple((k, *v) for k, v in ot.steps.items()),
                   resident_bytes=resident, accumulate_ns=adds[0], host_accumulate_ns=adds[1],
                   source=_source(src, gpu, model, note, made_for, ws))


def _made(src: Source, made_for: str) -> str:
    """The note of the trace as it was made, once however often it is re-timed."""
    head = f" (made for {made_for}: "
    note = src.note or ""
    if src.retime.get("made_for") and head in note:
        return note[note.index(head):]
    return f"{head}{note})"


def _source(src: Source, gpu: Any, model: str, note: str, made_for: str,
            workspace: int | None = None) -> Source:
    rec = {k: v for k, v in src.retime.items() if k not in ("workspace_bytes", "made_for")}
    ws = src.retime.get("workspace_bytes", 0) if workspace is None else workspace
    return replace(src, gpu=gpu.name, cost_model=model, note=note,
                   retime={**rec, **({"workspace_bytes": ws} if ws else {}),
                           "made_for": made_for})


def _carried(trace: Trace, gpu: Any, om: Any, made_for: str, model: str, how: str) -> Trace:
    """A profiled trace: each measured time times the op model's ratio, B's over A's. A
    ratio is of one model's times: where one GPU has a CNN kernel model (NOTE [op model])
    and the other has none, both are timed without it."""
    src = trace.source
    a = _preset_named(made_for)
    if a is None:
        raise ConfigError(f"{trace.name}: profiled on {made_for}, which is no GPU preset: "
                          "no op model to carry its times from")
    oa = _model(a, trace.name)
    if (om.cnn is None) != (oa.cnn is None):
        om, oa = replace(om, cnn=None), replace(oa, cnn=None)
    new, old = _times(trace, gpu, om), _times(trace, a, oa)

    def carry(t: int, b: float, o: float) -> int:
        return round(t * b / o) if o > 0 else t
    layers = []
    for x in trace.layers:
        (nf, nb), (of, ob) = new.times[x.id][:2], old.times[x.id][:2]
        algos = tuple(Algo(g.name, carry(g.fwd_ns, nf, of), carry(g.bwd_ns, nb, ob),
                           g.fwd_workspace_bytes, g.bwd_workspace_bytes, g.bwd_workspaces)
                      for g in x.algos)
        layers.append(replace(x, algos=algos))
    step = carry(trace.step_ns, new.steps[trace.optimizer][0], old.steps[trace.optimizer][0])
    note = (f"re-timed for {gpu.name} from a trace made for {made_for}: its measured times "
            f"carried by the ratio of the {how}'s times for {gpu.name} and {a.name}, layer by "
            f"layer; host times as measured" + _made(src, made_for))
    return replace(trace, layers=tuple(layers), step_ns=step, optimizer_steps=(),
                   accumulate_ns=carry(trace.accumulate_ns, new.accumulate[0],
                                       old.accumulate[0]),
                   source=_source(src, gpu, f"{model}-ratio", note, made_for))


def _preset_named(name: str) -> Any:
    """The preset a profiled trace's GPU is (its name or display name), else None."""
    from ..hardware import gpu_preset, preset_names
    return next((gpu_preset(n) for n in preset_names()
                 if name in (n, gpu_preset(n).display_name)), None)


def run_note(trace: Trace) -> tuple[str, ...]:
    """A run's one line where its trace was re-timed (NOTE [retime])."""
    made_for = (trace.source.retime or {}).get("made_for")
    if not made_for or made_for == trace.source.gpu:
        return ()
    how = ("its measured times carried by the op model's ratio"
           if trace.source.kind == "profiled" else
           "the op-level kernel model" if trace.source.cost_model == MODEL else
           "another GPU's op-level kernel model from its specs (uncalibrated)")
    return (f"{PREFIX} {trace.source.gpu} from a trace made for {made_for}, by {how}",)


def for_run(trace: Trace, gpu: Any) -> Trace:
    """``trace`` for a run on ``gpu``: re-timed where it can be, is timed and its GPU is
    another, else as it is (NOTE [retime])."""
    if trace.source.gpu == gpu.name or not trace.timed or not retimable(trace):
        return trace
    made_for = trace.source.retime.get("made_for") or trace.source.gpu or ""
    if trace.source.kind == "profiled" and _preset_named(made_for) is None:
        return trace  # measured on no preset (a CPU): no model to carry it from
    return retime(trace, gpu)
