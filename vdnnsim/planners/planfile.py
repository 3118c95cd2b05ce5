"""Plan files: the YAML ``vdnnsim plan -o`` writes and ``vdnnsim measure --plan``, the
``planned`` policy and the GPU runtimes read. Importable without torch or the engine.

NOTE [plan files]
There are two kinds, told apart by ``format`` (NOTE [file kinds]):
- ``vdnnsim-plan``, a layer plan (NOTE [planner]): per layer of the trace its algorithm,
  its offloads and the layer whose backward pass prefetches them; the batch splits (NOTE
  [batch split]) and the checkpointed segments, by layer id; ``layer_names`` says whether
  the ids are an fx graph's or an op-by-op trace's ATen ops (NOTE [plan layer names]).
- ``vdnnsim-block-plan``, a block plan (NOTE [block plan]): how many blocks, from the
  first, are offloaded, which are checkpointed (NOTE [block recompute]; after the
  offloaded ones where both are, NOTE [block mix]), and the blocks by module path (NOTE
  [blocks]).
Each kind is one pydantic model below, the only parser of the file: ``read_plan_file`` is
what every reader calls, ``write_plan_file`` what ``vdnnsim plan`` writes with (through the
same model, so that what it writes is what the readers take). The models check what the
file alone can tell (types, unknown keys, layer names that the file itself must hold);
whether a plan fits a trace (its layers, algorithms and buffers) is checked by its reader
against that trace (planner.plan_from_file) or model (the runtimes). Keys a plan file of an
older vdnnsim left out have the meaning they had then: a layer plan without
``layer_names`` names fx layers, a block plan without ``block_paths`` offloads the items of
the model's largest ModuleList, without ``recompute_paths`` checkpoints nothing.

NOTE [planned allocator]
A plan is checked by replaying it under its budget with PyTorch's caching allocator as
the run will have it: ``allocator`` says the settings it was planned under (``vdnnsim plan``
takes them from the run config's ``allocator:`` or ``--allocator``; left out: PyTorch's
defaults). Near the cap the settings decide whether a plan trains: the 3.4B Llama's plan
for the 24 GB card's 22 GiB ran out of memory under the default allocator (0.40 GiB
reserved but not allocated, in pieces the 126 MiB request could not use) and
trained with expandable segments (traces/h200_optimizer_offload/plans_3b_expandable). ``vdnnsim measure
--plan`` runs a plan under its settings unless ``--allocator`` says otherwise (and then
says that it differs); a replay of a layer plan under other settings (policy ``planned``)
carries a note.
"""

from __future__ import annotations

import os
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
        None, description="Step time; null for a memory-only trace (NOTE [memory-only "
        "traces]).")


class PlanAllocator(_Strict):
    """The caching allocator's settings a plan was checked under (NOTE [planned
    allocator]): those the engine models (NOTE [allocator settings])."""

    expandable_segments: StrictBool = Field(
        False, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")

    def conf(self) -> dict[str, Any]:
        """As ``vdnnsim measure --allocator`` takes them (only the keys set)."""
        return {"expandable_segments": True} if self.expandable_segments else {}


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


class LayerPlanFile(_Strict):
    """A ``vdnnsim-plan`` file (NOTE [plan files])."""

    format: Literal["vdnnsim-plan"] = Field(description="Always 'vdnnsim-plan'.")
    version: Annotated[Literal[1], BeforeValidator(whole)] = Field(
        1, description="Format version; this reader knows 1.")
    network: str = Field(description="The planned trace's network name.")
    batch_size: Annotated[int, Field(ge=1), BeforeValidator(whole)] = Field(
        description="The batch size it was planned for.")
    gpu: str = Field(description="The GPU preset it was planned on.")
    budget_bytes: Annotated[int, Field(ge=1), BeforeValidator(parse_bytes)] = Field(
        description="The memory budget it fits.")
    layer_names: Literal["fx", "ops"] = Field(
        "fx", description="fx: a torchvision or zoo trace's layers, which the vDNN runtime "
        "finds in its fx graph; ops: an op-by-op trace's ATen ops, which it cannot (NOTE "
        "[plan layer names]).")
    sync: StrictBool = Field(True, description="Each layer waits for its offloads and "
                             "prefetches, as the paper's runtime.")
    optimizer_offload: StrictBool = Field(False, description="The optimizer's state and "
                                          "step on the CPU (NOTE [optimizer offload]).")
    allocator: PlanAllocator | None = Field(
        None, description="The caching allocator's settings it was planned under (NOTE "
        "[planned allocator]); left out: PyTorch's defaults.")
    predicted: Predicted = Field(default_factory=Predicted,
                                 description="The simulator's prediction for it.")
    split: list[tuple[Name, Name, Annotated[int, Field(ge=1), BeforeValidator(whole)]]] = \
        Field(default_factory=list, description="Batch splits as [first, last, parts], "
              "by layer id of the trace before the split (NOTE [batch split]).")
    recompute: list[tuple[Name, Name]] = Field(
        default_factory=list, description="Checkpointed segments as [first, last] layer "
        "ids, in order and apart (NOTE [recompute]).")
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
        return self

    def segments(self) -> tuple[tuple[int, int], ...]:
        """The checkpointed segments as (first, last) layer indices, in order."""
        index = {r.id: k for k, r in enumerate(self.layers)}
        return tuple(sorted((index[a], index[b]) for a, b in self.recompute))


class BlockPlanFile(_Strict):
    """A ``vdnnsim-block-plan`` file (NOTE [plan files])."""

    format: Literal["vdnnsim-block-plan"] = Field(description="Always 'vdnnsim-block-plan'.")
    network: str = Field(description="The planned trace's network name.")
    batch_size: Annotated[int, Field(ge=1), BeforeValidator(whole)] = Field(
        description="The batch size it was planned for.")
    gpu: str = Field(description="The GPU preset it was planned on.")
    budget_bytes: Annotated[int, Field(ge=1), BeforeValidator(parse_bytes)] = Field(
        description="The memory budget it fits.")
    optimizer: Name = Field("sgd", description="The optimizer of the planned step (NOTE "
                            "[optimizer state]).")
    blocks: Count = Field(description="Blocks offloaded, from the first on.")
    total_blocks: Count = Field(description="Blocks the model has.")
    recompute_blocks: Count = Field(0, description="Blocks checkpointed, from the first "
                                    "after the offloaded ones on (NOTE [block recompute], "
                                    "NOTE [block mix]).")
    recompute_paths: list[Name] = Field(
        default_factory=list, description="The checkpointed blocks' module paths (those "
        "of the recompute_blocks that the runtime can wrap).")
    block_paths: list[Name] | None = Field(
        None, description="Every block's module path, in order (NOTE [blocks]); null: the "
        "items of the model's largest ModuleList (a plan of an older probe's trace).")
    optimizer_offload: StrictBool = Field(False, description="The optimizer's state and "
                                          "step on the CPU (NOTE [optimizer offload]).")
    param_blocks: Count = Field(0, description="Blocks whose parameters live on the host, "
                                "from the first on, fetched for each pass (NOTE [parameter "
                                "offload]); needs optimizer_offload.")
    optimizer_pinning: Literal["caching", "registered"] = Field(
        "caching", description="Where the optimizer on the CPU keeps its host copies (NOTE "
        "[optimizer pinning]); registered needs optimizer_offload.")
    allocator: PlanAllocator | None = Field(
        None, description="The caching allocator's settings it was planned under (NOTE "
        "[planned allocator]); left out: PyTorch's defaults.")
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
                                 f"not both (NOTE [block mix])")
        if self.block_paths is not None and len(self.block_paths) != self.total_blocks:
            raise ValueError(f"block_paths names {len(self.block_paths)} blocks, not the "
                             f"{self.total_blocks} of total_blocks")
        return self


PlanFile = LayerPlanFile | BlockPlanFile
MODELS: dict[str, type[LayerPlanFile] | type[BlockPlanFile]] = {
    FORMAT: LayerPlanFile, BLOCK_FORMAT: BlockPlanFile}


def plan_from_data(data: Any, source: str | os.PathLike = "plan") -> PlanFile:
    """A plan file's loaded contents as its model, or a ConfigError naming ``source`` and
    the key (NOTE [user errors])."""
    model = MODELS.get(data.get("format")) if isinstance(data, dict) else None
    if model is None:
        raise ConfigError(misplaced(data, source, "a vdnnsim plan file", ("plan",)) or
                          f"{shown(source)}: not a vdnnsim plan file (format: {FORMAT} or "
                          f"{BLOCK_FORMAT})")
    return parse_model(model, data, shown(source))


def read_plan_file(path: str | os.PathLike) -> PlanFile:
    """NOTE [plan files]: the plan file at ``path``, a layer or a block plan."""
    return plan_from_data(read_yaml(path, ConfigError), path)


def dumps_plan(plan: PlanFile | dict[str, Any]) -> str:
    """The YAML text of a plan (a model, or the contents a planner made, checked by the
    model of its format: a plan that its readers would refuse is a bug, not written)."""
    if isinstance(plan, dict):
        plan = MODELS[plan["format"]].model_validate(plan)
    data = plan.model_dump(mode="json")
    if data.get("optimizer_offload") is False:  # said only where on: older plans read alike
        del data["optimizer_offload"]
    if data.get("param_blocks") == 0:  # NOTE [parameter offload]: likewise
        del data["param_blocks"]
    if data.get("optimizer_pinning") == "caching":  # NOTE [optimizer pinning]: likewise
        del data["optimizer_pinning"]
    if not (data.get("allocator") or {}).get("expandable_segments"):  # NOTE [planned
        data.pop("allocator", None)  # allocator]: the defaults go unsaid, as before
    return yaml.safe_dump(data, sort_keys=False)


def write_plan_file(path: str | os.PathLike, plan: PlanFile | dict[str, Any]) -> None:
    """NOTE [plan files]: ``plan`` written whole or not at all (yamlio.write_text_atomic)."""
    write_text_atomic(path, dumps_plan(plan))
