"""The trace file format (YAML), version 1. See docs/trace-format.md.

NOTE [trace file]
The pydantic models below are the boundary: they reject unknown keys and impossible values
field by field, and :func:`check_graph` then checks what no single field can (ids unique,
references resolve, every tensor written once, reads after writes, no cycles, alias sizes).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..yamlio import parse_bytes
from ..limits import short_repr, whole

FORMAT = "vdnnsim-trace"
VERSION = 1

Bytes = Annotated[int, BeforeValidator(parse_bytes)]
# Times turn into floats in the reports; 10**18 ns (31 years) is far past any real layer
# and keeps them finite.
# the bounds before the validator: pydantic then checks them in its core, not in Python;
# the validator takes whole numbers only (NOTE [whole numbers])
Nanos = Annotated[int, Field(ge=0, le=10**18), BeforeValidator(whole)]


def _exact_int(value: Any) -> Any:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected the integer 1, got {short_repr(value)}")
    return value


MAX_ATTR_VALUES = 1000


def _small_attrs(value: Any) -> Any:
    """attrs are carried into every trace written from this one: a YAML alias bomb there
    would be written out whole. Counting stops at the bound, so a bomb costs nothing."""
    if not isinstance(value, dict):
        return value  # pydantic names the type error
    count, stack = 0, list(value.values())
    while stack:
        count += 1
        if count > MAX_ATTR_VALUES:
            raise ValueError(f"more than {MAX_ATTR_VALUES:,} values; attrs are short notes")
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AlgoSpec(_Strict):
    name: str = Field(description="Algorithm name, e.g. implicit_gemm, fft, winograd.")
    fwd_ns: Nanos = Field(description="Forward time in nanoseconds.")
    bwd_ns: Nanos = Field(description="Backward time (data and filter gradients) in ns.")
    fwd_workspace_bytes: Bytes = Field(0, description="Workspace the forward pass needs.")
    bwd_workspace_bytes: Bytes = Field(0, description="Workspace the backward pass needs.")
    bwd_workspaces: list[Bytes] | None = Field(None, description=(
        "The backward pass's workspaces one by one, in the order its calls allocate them "
        "(cuDNN's backward data, then backward filter), each freed before the next; their "
        "largest is bwd_workspace_bytes."))

    @model_validator(mode="after")
    def _largest_is_bwd(self) -> "AlgoSpec":
        if self.bwd_workspaces and max(self.bwd_workspaces) != self.bwd_workspace_bytes:
            raise ValueError(f"bwd_workspaces' largest ({max(self.bwd_workspaces)}) is not "
                             f"bwd_workspace_bytes ({self.bwd_workspace_bytes})")
        return self


class TensorSpec(_Strict):
    id: str = Field(min_length=1, description="Unique tensor id.")
    size_bytes: Bytes = Field(description="Size in bytes (int, or a string like '12 MiB').")
    kind: Literal["input", "activation", "extra"] = Field(
        "activation", description="input: network input; activation: a layer output that "
        "flows to other layers; extra: something a layer keeps only for its own backward.")
    requires_grad: bool | None = Field(
        None, description="Whether backward computes a gradient of it (default: true for "
        "activations, false for inputs and extras).")
    alias_of: str | None = Field(None, description="Id of the tensor whose buffer this one "
                                 "shares (in-place op output, view).")
    shape: list[int] | None = Field(None, description="Optional shape, for people.")


class LayerSpec(_Strict):
    id: str = Field(min_length=1, description="Unique layer id.")
    kind: str = Field(min_length=1, description="conv, fc, relu, maxpool, concat, ...")
    inputs: list[str] = Field(default_factory=list, description="Tensors read in forward.")
    outputs: list[str] = Field(default_factory=list, description="Tensors written in forward.")
    saved: list[str] = Field(default_factory=list,
                             description="Tensors kept for this layer's backward pass.")
    weight_bytes: Bytes = Field(0, description="Parameter bytes (weights and biases).")
    fwd_ns: Nanos | None = Field(None, description="Forward time (layers without algos).")
    bwd_ns: Nanos | None = Field(None, description="Backward time (layers without algos).")
    workspace_bytes: Bytes = Field(0, description="Temporary bytes (layers without algos).")
    host_fwd_ns: Nanos = Field(0, description="The host's time to issue the forward pass "
                               "(Python, dispatch, kernel launches); 0: not known.")
    host_bwd_ns: Nanos = Field(0, description="The host's time to issue the backward pass.")
    kernels_fwd: Annotated[int, Field(ge=0, le=10**6), BeforeValidator(whole)] | None = \
        Field(None, description="GPU commands (kernels, memsets, copies) the forward pass "
              "issues; absent: not known.")
    kernels_bwd: Annotated[int, Field(ge=0, le=10**6), BeforeValidator(whole)] | None = \
        Field(None, description="And the backward pass.")
    algos: list[AlgoSpec] | None = Field(None, description="Algorithm options (conv).")
    attrs: Annotated[dict[str, Any], BeforeValidator(_small_attrs)] = Field(
        default_factory=dict, description="Free-form facts for people (shapes, flops), at "
        "most 1,000 values.")

    @model_validator(mode="after")
    def _times_or_algos(self) -> "LayerSpec":
        if self.algos is not None:
            if not self.algos:
                raise ValueError("algos must list at least one algorithm")
            if self.fwd_ns is not None or self.bwd_ns is not None:
                raise ValueError("give either algos or fwd_ns/bwd_ns, not both")
        elif self.fwd_ns is None or self.bwd_ns is None:
            raise ValueError("a layer needs fwd_ns and bwd_ns, or a list of algos")
        return self


class RetimeSpec(_Strict):
    variant: Literal["fp32", "bf16", "fp16", "autocast"] = Field(
        description="The precision the op model's host costs are for (autocast: mixed).")
    param_bytes: Bytes = Field(description="Trainable parameter bytes the optimizer steps.")
    param_tensors: Annotated[int, Field(ge=0, le=10**9), BeforeValidator(whole)] = Field(
        description="Trainable parameter tensors the optimizer steps.")
    workspace_bytes: Bytes = Field(0, description="The GPU's cuBLAS workspaces counted in "
                                   "resident_bytes: another GPU's replace them.")
    made_for: str | None = Field(None, description="The GPU the trace was made for, where "
                                 "it has been re-timed since.")


class SourceSpec(_Strict):
    kind: Literal["synthesized", "profiled", "handwritten"] = Field(
        "handwritten", description="How the trace was made.")
    framework: Literal["torch7", "pytorch"] = Field(
        "torch7", description="Whose memory semantics the trace follows: torch7 (the paper's "
        "Torch with CNMeM) or pytorch (autograd and the caching allocator).")
    gpu: str | None = Field(None, description="GPU preset or device name.")
    cost_model: str | None = Field(None, description="Cost model that synthesized it.")
    software: dict[str, str] = Field(default_factory=dict, description="Versions.")
    note: str | None = Field(None, description="Anything a reader should know.")
    host_probe_ns: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="How fast the profiling machine's host was: its median time per tiny "
        "kernel launch, ns, before the model was built.")
    host_probe_between_ns: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="The same probe after each timed step, the median: what follows the "
        "host's speed over the steps.")
    retime: RetimeSpec | None = Field(
        None, description="What re-timing the trace for another GPU needs beside each "
        "layer's attrs op and seq (docs/trace-format.md): absent, it cannot be re-timed.")


class TraceSpec(_Strict):
    format: Literal["vdnnsim-trace"] = Field(description="Always 'vdnnsim-trace'.")
    version: Annotated[Literal[1], BeforeValidator(_exact_int)] = Field(
        description="Schema version; this reader knows 1.")
    name: str = Field(description="Network name.")
    batch_size: Annotated[int, BeforeValidator(whole)] = Field(ge=1, le=2**50, description="Batch size the sizes and times are "
                            "for (at most 2**50: a batch that large cannot fit 1 PiB).")
    dtype: Literal["fp32", "fp16", "bf16"] = Field("fp32", description="Element type.")
    source: SourceSpec = Field(default_factory=SourceSpec, description="Provenance.")
    tensors: list[TensorSpec] = Field(description="Every tensor, network inputs first.")
    layers: list[LayerSpec] = Field(min_length=1, description="Layers in execution order.")
    step_ns: Nanos = Field(0, description="Time after the backward pass (the optimizer step).")
    host_step_ns: Nanos = Field(0, description="The host's time for zero_grad and the "
                                "optimizer step.")
    resident_bytes: Bytes = Field(0, description=(
        "Device memory the framework holds from before the first layer to the end, beyond "
        "the weights and the input: BLAS workspaces, batch-norm running statistics."))
    step_workspace_bytes: Bytes = Field(0, description=(
        "Temporary device memory the optimizer step takes while it runs (AdamW's foreach "
        "intermediates)."))
    optimizer_steps: dict[Literal["sgd", "adam", "adamw"], list[Nanos]] | None = Field(
        None, description="Calibrated [GPU ns, host ns] of each optimizer's step over these "
        "parameters, where the trace's cost model has them: with_optimizer takes them "
        "instead of scaling the SGD step.")
    micro_batches: Annotated[int, Field(ge=1, le=10**6), BeforeValidator(whole)] = Field(
        1, description="Forward and backward passes of batch_size a step, the gradients "
        "added up before the one optimizer step (gradient accumulation).")
    accumulate_ns: Nanos = Field(0, description="GPU time of a pass's gradient adds into "
                                 "the gradients already there (every pass after the first).")
    host_accumulate_ns: Nanos = Field(0, description="The host's time to issue them.")
    checkpointed: list[Annotated[list[str], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, description="[first, last] layer ids of each segment the model "
        "checkpoints itself (its own gradient checkpointing): recomputed in every run.")
    optimizer: Literal["sgd", "adam", "adamw"] = Field("sgd", description=(
        "The optimizer whose step step_ns, host_step_ns, step_workspace_bytes and the "
        "moments in resident_bytes are; sgd unless profiled with another."))
