"""Module paths and blocks: which module each op of the probe ran in, and the blocks
chosen from the module calls the probe saw."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from .fx import ProbeNode


# NOTE [module paths]
# Every op of the probe carries the path of the innermost module whose forward pass it ran
# in (``attrs['module']``: ``layer1.0.conv1``, ``model.layers.3.self_attn``; "" is the
# model's own forward, OUTSIDE what runs outside it, the loss), the name a user knows it by
# and the unit that profiles (torch.profiler ranges named by the same paths) and plans are
# to speak in. A module called twice tags the ops of both calls; a module shared under two
# names (tied or re-entrant) has the first name ``named_modules`` gives it; a submodule
# whose weights a parent uses without calling it (MultiheadAttention's ``out_proj``) has no
# ops of its own, they are the parent's. The hooks run whether or not the forward pass
# raises (``always_call``), so the path is never left stale.
OUTSIDE = "<outside>"


def module_paths(model: torch.nn.Module, enter, calls: list | None = None) -> list[Any]:
    """Call ``enter(path)`` whenever the innermost running module
    changes (``OUTSIDE`` once the model's forward pass has returned); append each module
    call to ``calls`` as (path, index in ``calls`` of the call it ran in, -1 for none).
    Returns the hook handles."""
    stack: list[tuple[str, int]] = []

    def pre(path: str):
        def hook(m, args):
            k = -1
            if calls is not None:
                k = len(calls)
                calls.append((path, stack[-1][1] if stack else -1))
            stack.append((path, k))
            enter(path)
        return hook

    def post(m, args, out):
        if stack:
            stack.pop()
        enter(stack[-1][0] if stack else OUTSIDE)

    handles = []
    for path, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(pre(path)))
        handles.append(m.register_forward_hook(post, always_call=True))
    return handles


# NOTE [blocks]
# The unit of block offload, block plans and the block runtime is a *block*: a module the
# forward pass calls once, in sequence with the other blocks, named by its module path and
# chosen from the module calls the probe saw (``choose_blocks``). A transformer's blocks
# are the items of its largest ModuleList when that list holds at least half the model's
# parameters, each item called once and in order. Any other model is cut along its call
# tree: from the root's calls, the unit with the most ops is opened into its calls while it
# holds more than 1/BLOCK_SHARE of the step's ops and each of those modules is called once
# in the step; units with no op are dropped; fewer than MIN_BLOCKS: no blocks. Each op is
# tagged with its region (``attrs['block']``: 0 before the first block, k + 1 from block k
# on, N + 1 after the last) and a region's first op with its block's path
# (``attrs['block_path']``); regions never go back.
#
# Examples: GPT-2's ``h`` and Llama's ``layers`` are lists of blocks; a CNN built by a
# factory, a DLA tree or res2net (whose per-block ``convs`` list holds little) are cut along
# the call tree; a module called twice (a shared activation, ALBERT's one layer) cannot be
# hooked as one block. An op of a module shared with an earlier block (named by its first
# path) stays in the region running when it ran. Time is measured per module; blocks are
# only the unit of offload.
MIN_BLOCKS = 3  # fewer units offload nothing worth a plan
BLOCK_SHARE = 16  # a unit with more than 1/16 of the ops is opened into its calls


def choose_blocks(model: torch.nn.Module, calls: list[tuple[str, int]],
                  nodes: list[ProbeNode]) -> list[str]:
    """The blocks' paths in call order; ``calls`` is every module call of
    the step as (path, index of the call it was made in, -1 for none)."""
    count = Counter(path for path, _ in calls)
    kids: dict[int, list[int]] = {}
    for i, (_, parent) in enumerate(calls):
        kids.setdefault(parent, []).append(i)
    ops: dict[str, int] = {}
    for n in nodes:
        m = n.attrs.get("module", OUTSIDE)
        if m == OUTSIDE:
            continue
        parts = m.split(".") if m else []
        for k in range(len(parts) + 1):
            p = ".".join(parts[:k])
            ops[p] = ops.get(p, 0) + 1
    total = len(nodes)
    params = sum(p.numel() for p in model.parameters())
    best, most = _largest_module_list(model)
    if best and 2 * most >= params and all(count[p] == 1 for p in best):
        listed = set(best)
        if [path for path, _ in calls if path in listed] == best:
            return [p for p in best if ops.get(p)]
    roots = [i for i, (path, parent) in enumerate(calls) if parent == -1]
    units = [c for r in roots for c in kids.get(r, [])]
    done: set[int] = set()
    while True:
        open_ = [u for u in units if u not in done]
        if not open_:
            break
        u = max(open_, key=lambda i: ops.get(calls[i][0], 0))
        if ops.get(calls[u][0], 0) * BLOCK_SHARE <= total:
            break
        ch = kids.get(u, [])
        if not ch or any(count[calls[c][0]] != 1 for c in ch) or count[calls[u][0]] != 1:
            done.add(u)
            continue
        k = units.index(u)
        units[k:k + 1] = ch
    # the root's own calls may include a module called twice: no block
    paths = [p for p in (calls[u][0] for u in units) if count[p] == 1 and ops.get(p)]
    return paths if len(paths) >= MIN_BLOCKS else []


def _largest_module_list(model: torch.nn.Module) -> tuple[list[str], int]:
    """The paths of the items of the model's ModuleList (of two or more) with the most
    parameters, and that count; ([], 0) where it has none."""
    best: list[str] = []
    most = 0
    for path, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2:
            k = sum(p.numel() for p in m.parameters())
            if k > most:
                best, most = [f"{path}.{j}" if path else str(j) for j in range(len(m))], k
    return best, most


def find_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The items of the model's ModuleList with the most parameters: the blocks of a plan
    written before blocks were chosen by call (it names no paths)."""
    return [model.get_submodule(p) for p in _largest_module_list(model)[0]]


def tag_blocks(nodes: list[ProbeNode], paths: list[str]) -> None:
    """Each op's region by the module path it ran in, and each block's path
    on the first op of its region."""
    where = {p: k + 1 for k, p in enumerate(paths)}
    last = 0
    for n in nodes:
        m = n.attrs.get("module", OUTSIDE)
        r = None
        if m != OUTSIDE:
            parts = m.split(".") if m else []
            for k in range(len(parts), 0, -1):
                r = where.get(".".join(parts[:k]))
                if r is not None:
                    break
        if r is not None and r < last:
            # a module shared with an earlier block (its first path names it): it ran in
            # the block now running, or between blocks after it, never back in that one
            r = None
        if r is None:  # between blocks: the region of the block before; after the last
            r = len(paths) + 1 if last == len(paths) and paths else last
        elif r != last:
            n.attrs["block_path"] = paths[r - 1]
        n.attrs["block"] = r
        last = max(last, r)


def block_output(out: Any) -> torch.Tensor | None:
    """The hidden state a block returns (a tensor, a tuple's first
    tensor, a model output's ``last_hidden_state``)."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return next((o for o in out if isinstance(o, torch.Tensor)), None)
    if isinstance(out, dict):
        return next((o for o in out.values() if isinstance(o, torch.Tensor)), None)
    return getattr(out, "last_hidden_state", None)
