"""Plan files: the YAML ``vdnnsim plan -o`` writes and ``vdnnsim measure --plan``, the
``planned`` policy and the GPU runtimes read. Importable without torch or the engine.

NOTE [plan files]
A plan file is the contract between ``vdnnsim plan`` and what runs the plan (``vdnnsim
measure --plan``, policy ``planned``, the GPU runtimes). Two kinds, told apart by
``format``: ``vdnnsim-plan``, a layer plan (per layer its algorithm, offloads and
prefetch; batch splits and checkpointed segments by layer id), and ``vdnnsim-block-plan``,
a block plan (how many blocks, from the first, are offloaded, checkpointed after them,
or keep their parameters on the host). Each kind is one pydantic model below, the only
parser: what ``write_plan_file`` writes is what ``read_plan_file`` takes. The file alone is
checked here; whether it fits a trace or a model, by its reader. Version 2 adds the run
(model, dtype, sequence length, a layer plan's optimizer); a key an older file left out
keeps the meaning it had then (no ``layer_names``: fx layers; no ``block_paths``: the
model's largest ModuleList; no ``recompute_paths``: nothing checkpointed).

NOTE [planned allocator]
A plan is checked by replaying it under its budget with PyTorch's caching allocator as
the run will have it: ``allocator`` says the settings it was planned under (``vdnnsim plan``
takes them from the run config's ``allocator:`` or ``--allocator``; left out: PyTorch's
defaults). Near the cap the settings decide whether a plan trains (docs/configs.md, under
``vdnnsim plan``). ``vdnnsim measure --plan`` runs a plan under its settings, capped at its
budget, unless ``--allocator`` (or ``--memory-cap``) says otherwise, and then says that it
differs; a replay of a layer plan under other settings (policy ``planned``) carries a note.
"""

from __future__ import annotations

import json
import os
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool,
                      model_serializer, model_validator)

from ..errors import ConfigError
from ..limits import whole
from ..yamlio import misplaced, parse_bytes, parse_model, read_yaml, shown, write_text_atomic

FORMAT = "vdnnsim-plan"
BLOCK_FORMAT = "vdnnsim-block-plan"

Count = Annotated[int, Field(ge=0), BeforeValidator(whole)]
Name = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Predicted(_Strict):
    """What the simulator predicted for the plan when it was made (for people; no reader
    acts on it)."""

    peak_memory_bytes: Count | None = Field(None, description="Peak allocated bytes.")
    iteration_time_ns: Count | None = Field(
        None, description="Step time; null for a memory-only trace.")


class PlanAllocator(_Strict):
    """The caching allocator's settings a plan was checked under, those the engine
    models (NOTE [planned allocator])."""

    expandable_segments: StrictBool = Field(
        False, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")

    def conf(self) -> dict[str, Any]:
        """As ``vdnnsim measure --allocator`` takes them (only the keys set)."""
        return {"expandable_segments": True} if self.expandable_segments else {}


class TensorKey(_Strict):
    """An offloaded buffer of an op-by-op trace as the tensor runtime finds it in the
    model's step (NOTE [tensor plans])."""

    id: Name = Field(description="The trace's buffer id (the op that makes it).")
    module: str = Field(description="The module path running when it is made ('' for the "
                        "model's own forward).")
    shape: list[Annotated[int, Field(ge=0), BeforeValidator(whole)]] = Field(
        description="Its shape.")
    dtype: Name = Field(description="Its dtype, as torch names it (float32, bfloat16).")
    bytes: Count = Field(description="Its size in bytes.")


class LayerRow(_Strict):
    """One layer of a layer plan, in the trace's order."""

    id: Name = Field(description="The trace's layer id (after its batch splits).")
    algo: Name = Field(description="The algorithm it runs, one of the trace's for it.")
    offload: list[Name] = Field(default_factory=list,
                                description="Buffers copied to the host after its forward "
                                "pass (left out of the file where none).")
    prefetch: Name | None = Field(None, description="The layer whose offloaded buffers its "
                                  "backward pass brings back (left out where none).")

    @model_serializer(mode="wrap")
    def _compact(self, handler: Any) -> dict[str, Any]:
        """Written as ``vdnnsim plan`` always wrote a row: no empty offload, no prefetch
        of none."""
        out = handler(self)
        if not out.get("offload"):
            out.pop("offload", None)
        if out.get("prefetch") is None:
            out.pop("prefetch", None)
        return out


class _PlanRun(_Strict):
    """What both kinds of plan file say of the run they plan (the kinds override
    ``format`` and ``version``, keeping their places in the file)."""

    format: str = Field(description="The kind of plan file.")
    version: Annotated[Literal[1, 2], BeforeValidator(whole)] = Field(
        1, description="Format version.")
    network: str = Field(description="The planned trace's network name.")
    batch_size: Annotated[int, Field(ge=1), BeforeValidator(whole)] = Field(
        description="The batch size it was planned for.")
    gpu: str = Field(description="The GPU preset it was planned on.")
    budget_bytes: Annotated[int, Field(ge=1), BeforeValidator(parse_bytes)] = Field(
        description="The memory budget it fits.")
    margin_bytes: Count = Field(0, description="Bytes of the budget it was planned to leave "
                                "free (vdnnsim plan --margin); left out where none.")
    optimizer: Name = Field("sgd", description="The optimizer of the planned step.")
    # version 2 on: what a measurement builds and trains, so that vdnnsim measure --plan
    # asks for nothing the plan knows (left out where the planned trace does not say)
    model: Name | None = Field(None, description="The model spec the trace was profiled "
                               "from, e.g. hf:gpt2 or torchvision:vgg16.")
    dtype: Literal["fp32", "fp16", "bf16", "autocast-bf16", "autocast-fp16"] | None = Field(
        None, description="The precision it was profiled in.")
    seq_len: Annotated[int, Field(ge=1), BeforeValidator(whole)] | None = Field(
        None, description="An hf: language model's sequence length.")
    # version 3 on: a factory model's input and keyword arguments
    input: Name | None = Field(None, description="A factory model's input (vdnnsim "
                               "measure --input), e.g. image:3,224,224:1000.")
    model_args: dict[str, Any] | None = Field(None, description="A factory model's keyword "
                                              "arguments (vdnnsim measure --model-arg).")


class LayerPlanFile(_PlanRun):
    """A ``vdnnsim-plan`` file."""

    format: Literal["vdnnsim-plan"] = Field(description="Always 'vdnnsim-plan'.")
    version: Annotated[Literal[1, 2, 3], BeforeValidator(whole)] = Field(
        1, description="Format version; this reader knows 1, 2 (the model, dtype, "
        "sequence length and optimizer of the run) and 3 (an op-by-op trace's plan with "
        "what the tensor runtime needs to run it: tensors, recompute_modules).")
    layer_names: Literal["fx", "ops"] = Field(
        "fx", description="fx: a torchvision or zoo trace's layers, which the vDNN runtime "
        "finds in its fx graph; ops: an op-by-op trace's ATen ops, which it cannot.")
    sync: StrictBool = Field(True, description="Each layer waits for its offloads and "
                             "prefetches, as the paper's runtime.")
    optimizer_offload: StrictBool = Field(False, description="The optimizer's state and "
                                          "step on the CPU.")
    allocator: PlanAllocator | None = Field(
        None, description="The caching allocator's settings it was planned under; left "
        "out: PyTorch's defaults.")
    predicted: Predicted = Field(default_factory=Predicted,
                                 description="The simulator's prediction for it.")
    split: list[tuple[Name, Name, Annotated[int, Field(ge=1), BeforeValidator(whole)]]] = \
        Field(default_factory=list, description="Batch splits as [first, last, parts], "
              "by layer id of the trace before the split.")
    recompute: list[tuple[Name, Name]] = Field(
        default_factory=list, description="Checkpointed segments as [first, last] layer "
        "ids, in order and apart.")
    recompute_modules: list[Name] = Field(
        default_factory=list, description="Version 3: the module paths the tensor runtime "
        "checkpoints, whose calls are exactly the recompute segments.")
    tensors: list[TensorKey] = Field(
        default_factory=list, description="Version 3: every offloaded buffer's key, by "
        "which the tensor runtime finds it in the model's step.")
    layers: list[LayerRow] = Field(min_length=1, description="Every layer of the trace "
                                   "(after its splits), in order.")

    @model_validator(mode="after")
    def _names_are_its_layers(self) -> "LayerPlanFile":
        index: dict[str, int] = {}
        for k, r in enumerate(self.layers):
            if r.id in index:
                raise ValueError(f"layer {r.id} is listed twice")
            index[r.id] = k
        for r in self.layers:
            if r.prefetch is not None and r.prefetch not in index:
                raise ValueError(f"layer {r.id}: prefetch names no layer of the plan: "
                                 f"{r.prefetch}")
        for a, b in self.recompute:
            if a not in index or b not in index or index[a] > index[b]:
                raise ValueError(f"recompute [{a}, {b}] is not a run of the plan's layers")
        spans = sorted((index[a], index[b]) for a, b in self.recompute)
        if any(spans[k][0] <= spans[k - 1][1] for k in range(1, len(spans))):
            raise ValueError("recompute segments overlap")
        if self.version < 3 and (self.tensors or self.recompute_modules):
            raise ValueError("tensors and recompute_modules are version 3's")
        if self.version >= 3:
            if self.layer_names != "ops":
                raise ValueError("a version 3 plan is an op-by-op trace's (layer_names: ops)")
            offloaded = {b for r in self.layers for b in r.offload}
            keyed = [t.id for t in self.tensors]
            if len(set(keyed)) != len(keyed):
                raise ValueError("tensors names a buffer twice")
            if set(keyed) != offloaded:
                diff = sorted(offloaded.symmetric_difference(keyed))
                raise ValueError(f"tensors must key every offloaded buffer and no other "
                                 f"(not so for {diff[0]})")
            if self.recompute and not self.recompute_modules:
                raise ValueError("recompute segments without recompute_modules, which the "
                                 "tensor runtime checkpoints")
        return self

    @property
    def runnable(self) -> bool:
        """Whether a runtime can run it: a layer plan of fx layers (the vDNN runtime), or a
        version 3 plan of an op-by-op trace (the tensor runtime)."""
        return self.layer_names == "fx" or self.version >= 3

    def segments(self) -> tuple[tuple[int, int], ...]:
        """The checkpointed segments as (first, last) layer indices, in order."""
        index = {r.id: k for k, r in enumerate(self.layers)}
        return tuple(sorted((index[a], index[b]) for a, b in self.recompute))


class BlockPlanFile(_PlanRun):
    """A ``vdnnsim-block-plan`` file."""

    format: Literal["vdnnsim-block-plan"] = Field(description="Always 'vdnnsim-block-plan'.")
    version: Annotated[Literal[1, 2], BeforeValidator(whole)] = Field(
        1, description="Format version; this reader knows 1 and 2 (2: the model, dtype and "
        "sequence length of the run).")
    blocks: Count = Field(description="Blocks offloaded, from the first on.")
    total_blocks: Count = Field(description="Blocks the model has.")
    recompute_blocks: Count = Field(0, description="Blocks checkpointed, from the first "
                                    "after the offloaded ones on.")
    recompute_paths: list[Name] = Field(
        default_factory=list, description="The checkpointed blocks' module paths (those "
        "of the recompute_blocks that the runtime can wrap).")
    block_paths: list[Name] | None = Field(
        None, description="Every block's module path, in order; null: the "
        "items of the model's largest ModuleList (a plan of an older probe's trace).")
    optimizer_offload: StrictBool = Field(False, description="The optimizer's state and "
                                          "step on the CPU.")
    param_blocks: Count = Field(0, description="Blocks whose parameters live on the host, "
                                "from the first on, fetched for each pass; needs "
                                "optimizer_offload.")
    optimizer_pinning: Literal["caching", "registered"] = Field(
        "caching", description="Where the optimizer on the CPU keeps its host copies; "
        "registered needs optimizer_offload.")
    allocator: PlanAllocator | None = Field(
        None, description="The caching allocator's settings it was planned under; left "
        "out: PyTorch's defaults.")
    predicted: Predicted = Field(default_factory=Predicted,
                                 description="The simulator's prediction for it.")

    @model_validator(mode="after")
    def _counts_of_its_blocks(self) -> "BlockPlanFile":
        if self.param_blocks and not self.optimizer_offload:
            raise ValueError("param_blocks needs optimizer_offload: true (the optimizer on "
                             "the CPU holds the parameters' master copies)")
        if self.optimizer_pinning != "caching" and not self.optimizer_offload:
            raise ValueError("optimizer_pinning needs optimizer_offload: true")
        for key in ("blocks", "recompute_blocks", "param_blocks"):
            if getattr(self, key) > self.total_blocks:
                raise ValueError(f"{key} {getattr(self, key)} is more than the "
                                 f"{self.total_blocks} blocks of total_blocks")
        if self.blocks + self.recompute_blocks > self.total_blocks:
            raise ValueError(f"blocks {self.blocks} offloaded and recompute_blocks "
                             f"{self.recompute_blocks} after them are more than the "
                             f"{self.total_blocks} blocks of total_blocks")
        if self.block_paths is not None:
            offloaded = set(self.block_paths[:self.blocks])
            both = [p for p in self.recompute_paths if p in offloaded]
            if both:
                raise ValueError(f"recompute_paths names {both[0]}, one of the {self.blocks} "
                                 f"offloaded blocks: a block is offloaded or checkpointed, "
                                 f"not both")
        if self.block_paths is not None and len(self.block_paths) != self.total_blocks:
            raise ValueError(f"block_paths names {len(self.block_paths)} blocks, not the "
                             f"{self.total_blocks} of total_blocks")
        return self


PlanFile = LayerPlanFile | BlockPlanFile
MODELS: dict[str, type[LayerPlanFile] | type[BlockPlanFile]] = {
    FORMAT: LayerPlanFile, BLOCK_FORMAT: BlockPlanFile}


def plan_from_data(data: Any, source: str | os.PathLike = "plan") -> PlanFile:
    """A plan file's loaded contents as its model, or a ConfigError naming ``source`` and
    the key."""
    model = MODELS.get(data.get("format")) if isinstance(data, dict) else None
    if model is None:
        raise ConfigError(misplaced(data, source, "a vdnnsim plan file", ("plan",)) or
                          f"{shown(source)}: not a vdnnsim plan file (format: {FORMAT} or "
                          f"{BLOCK_FORMAT})")
    return parse_model(model, data, shown(source))


def read_plan_file(path: str | os.PathLike) -> PlanFile:
    """The plan file at ``path``, a layer or a block plan."""
    return plan_from_data(read_yaml(path, ConfigError), path)


def dumps_plan(plan: PlanFile | dict[str, Any]) -> str:
    """The YAML text of a plan (a model, or the contents a planner made, checked by the
    model of its format: a plan that its readers would refuse is a bug, not written)."""
    if isinstance(plan, dict):
        plan = MODELS[plan["format"]].model_validate(plan)
    data = plan.model_dump(mode="json")
    for key in ("model", "dtype", "seq_len", "input", "model_args"):  # said where known
        if data.get(key) is None:
            del data[key]
    if data["format"] == BLOCK_FORMAT and data.get("version") == 1:
        del data["version"]  # a block plan of version 1 never said it
    if data["format"] == FORMAT and data.get("optimizer") == "sgd" and data["version"] == 1:
        del data["optimizer"]
    if data["format"] == FORMAT and data["version"] < 3:  # version 3's keys, unsaid before
        del data["tensors"], data["recompute_modules"]
    if data.get("optimizer_offload") is False:  # said only where on: older plans read alike
        del data["optimizer_offload"]
    if data.get("margin_bytes") == 0:  # likewise
        del data["margin_bytes"]
    if data.get("param_blocks") == 0:  # likewise
        del data["param_blocks"]
    if data.get("optimizer_pinning") == "caching":  # likewise
        del data["optimizer_pinning"]
    if not (data.get("allocator") or {}).get("expandable_segments"):
        data.pop("allocator", None)  # the defaults go unsaid, as before
    return yaml.safe_dump(data, sort_keys=False)


def write_plan_file(path: str | os.PathLike, plan: PlanFile | dict[str, Any]) -> None:
    """``plan`` written whole or not at all (yamlio.write_text_atomic)."""
    write_text_atomic(path, dumps_plan(plan))


# how a trace says the run it was made of: vdnnsim profile's note, the op probe's on the
# meta device (memory_trace)
PROFILED_AS = re.compile(r"vdnnsim profile --model (\S+) --batch \d+;?(?: --dtype ([\w-]+))?"
                         r"(?: --seq-len (\d+))?")
META_AS = re.compile(r"(\S+), ([\w-]+)(?:, seq_len (\d+))?(?:, input (\S+))?"
                     r"(?:, args (\{.*?\}))?: meta device")


def margin_said(budgets: tuple[int, int]) -> dict[str, int]:
    """What a plan file says of NOTE [plan margin] for (budget, room planned): nothing where
    there is none."""
    return {"margin_bytes": budgets[0] - budgets[1]} if budgets[0] > budgets[1] else {}


def with_run(plan_file: dict[str, Any], trace: Any) -> dict[str, Any]:
    """A plan file with what a measurement of it runs (version 2), where the trace says how
    it was profiled (its source's note); as it was where it does not."""
    note = trace.source.note or ""
    m = PROFILED_AS.match(note)
    meta = None if m else META_AS.match(note)
    if not (m or meta):
        return plan_file
    model, dtype, seq_len = (m or meta).groups()[:3]
    run = {"optimizer": trace.optimizer, "model": model, "dtype": dtype or trace.dtype,
           **({"seq_len": int(seq_len)} if seq_len else {})}
    if meta is not None and plan_file.get("version", 1) >= 3:  # a factory's input and args
        inp, args = meta.groups()[3:]
        run.update({"input": inp} if inp else {})
        run.update({"model_args": json.loads(args)} if args else {})
    head = {k: v for k, v in plan_file.items() if k not in run}
    keys = list(head)
    at = keys.index("budget_bytes") + 1
    out = {k: head[k] for k in keys[:at]}
    out.update(run)
    out.update({k: head[k] for k in keys[at:]})
    out["version"] = max(2, plan_file.get("version", 1))
    return {"format": out.pop("format"), "version": out.pop("version"), **out}
