"""The paper's policies (shared/reference/vdnn_paper.md), each exactly as its text says.

Names: ``baseline_m``/``baseline_p`` (network-wide allocation, memory- or
performance-optimal algorithms), ``vdnn_all_m``/``vdnn_all_p``, ``vdnn_conv_m``/
``vdnn_conv_p`` and ``vdnn_dyn``. Options every policy takes (the baselines ignore them):
``sync`` (default true: the end-of-layer stream synchronisation of the paper; false models
vDNN++'s removal of it), ``prefetch`` (default true: findPrefetchLayer; false fetches
each offloaded buffer on demand, a what-if that trades stalls for memory), ``reading``
('measured', the default, or 'text': which layers findPrefetchLayer sees as offloaded,
NOTE [offload marks]), ``distance`` (0, the default: findPrefetchLayer; k >= 1: a layer's
offloads are prefetched during the backward pass of the layer k above it,
NOTE [prefetch distance]) and ``placement`` ('best', the default: CNMeM's best fit; 'first':
the lowest-addressed free block that holds the request; Torch7 traces only,
NOTE [placement]).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import ConfigError
from ..hardware import GPU
from ..trace.model import Trace
from .context import NO_CONTEXT, PolicyContext
from .plan import (PLACEMENTS, READINGS, Plan, find_prefetch_schedule, join_view, liveness,
                   offload_sets, policy_marks)
from ..limits import short_repr, whole_number


def algo_choice(trace: Trace, mode: str) -> tuple[int, ...]:
    return trace.leanest_algos if mode == "m" else trace.fastest_algos


def check_options(name: str, options: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(options) - allowed
    if unknown:
        raise ConfigError(f"policy {name}: unknown option(s) {', '.join(sorted(unknown))}; "
                          f"known: {', '.join(sorted(allowed | set(COMMON_OPTIONS)))}")


COMMON_OPTIONS = ("sync", "prefetch", "reading", "distance", "placement")


class Common(NamedTuple):
    sync: bool
    prefetch: bool
    reading: str
    distance: int  # 0: findPrefetchLayer
    placement: str  # 'best' | 'first'


def bool_option(name: str, options: dict[str, Any], key: str) -> bool:
    """Pop and check a boolean option (a YAML boolean, default true)."""
    value = options.pop(key, True)
    if not isinstance(value, bool):
        raise ConfigError(f"policy {name}: option {key} must be true or false, got "
                          f"{short_repr(value)}")
    return value


def _whole_or_none(value: Any) -> int | None:
    """A count option (2, 2.0 and '2e0' alike), or None."""
    try:
        return whole_number(value)
    except ValueError:
        return None


def common_options(name: str, options: dict[str, Any], trace: Trace | None = None) -> Common:
    """The options every policy takes, popped from ``options``."""
    reading = options.pop("reading", "measured")
    if reading not in READINGS:
        raise ConfigError(f"policy {name}: option reading must be one of "
                          f"{', '.join(READINGS)}, got {short_repr(reading)}")
    given = options.pop("distance", 0)
    distance = _whole_or_none(given)
    if distance is None or not 0 <= distance <= 10**6:
        raise ConfigError(f"policy {name}: option distance must be an integer from 0 "
                          f"(findPrefetchLayer) to 1000000, got {short_repr(given)}")
    placement = options.pop("placement", "best")
    if placement not in PLACEMENTS:
        raise ConfigError(f"policy {name}: option placement must be one of "
                          f"{', '.join(PLACEMENTS)}, got {short_repr(placement)}")
    if placement != "best" and trace is not None and trace.pytorch:
        raise ConfigError(f"policy {name}: option placement applies to the CNMeM pool of "
                          "Torch7 traces; PyTorch's caching allocator has its own")
    return Common(bool_option(name, options, "sync"), bool_option(name, options, "prefetch"),
                  reading, distance, placement)


def baseline(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
             ctx: PolicyContext = NO_CONTEXT) -> Plan:
    opts = dict(options)
    algo = opts.pop("algo")
    c = common_options(f"baseline_{algo}", opts, trace)  # one option set serves every policy
    check_options(f"baseline_{algo}", opts, set())
    n = len(trace.layers)
    return Plan(f"baseline_{algo}", "network_wide", algo_choice(trace, algo),
                ((),) * n, (-1,) * n, placement=c.placement)


def static_vdnn(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
                ctx: PolicyContext = NO_CONTEXT) -> Plan:
    opts = dict(options)
    which, algo = opts.pop("which"), opts.pop("algo")
    name = f"vdnn_{which}_{algo}"
    c = common_options(name, opts, trace)
    check_options(name, opts, set())
    return vdnn_plan(trace, which, algo_choice(trace, algo), c.sync, name, c.prefetch, c.reading,
                     c.distance, c.placement, joins=True)


def vdnn_plan(trace: Trace, which: str, algos: tuple[int, ...], sync: bool = True,
              name: str | None = None, prefetch: bool = True,
              reading: str = "measured", distance: int = 0, placement: str = "best",
              joins: bool = False) -> Plan:
    """Layer-wise allocation offloading ``which`` ('all', 'conv' or 'none') layers' inputs.
    Without ``prefetch`` no findPrefetchLayer runs: each offloaded buffer is fetched on
    demand by the first backward pass that needs it. ``reading``: NOTE [offload marks];
    ``distance``: NOTE [prefetch distance]; ``placement``: NOTE [placement]; ``joins``: the
    plan runs the paper's runtime's joins, which hold no bytes of their own (the plan then
    carries that trace)."""
    original = trace
    if joins:
        trace = join_view(trace)
    lv = liveness(trace)
    n = len(trace.layers)
    offload = ((),) * n if which == "none" else offload_sets(trace, lv, which == "conv")
    if not prefetch:
        schedule = (-1,) * n
    elif distance:
        schedule = distance_schedule(offload, distance)
    else:  # one scan per trace, kind and reading
        schedule = trace.memo(("vdnn_schedule", which, reading), lambda: find_prefetch_schedule(
            trace, offload, policy_marks(trace, which, reading)))
    return Plan(name or f"vdnn_{which}", "layer_wise", algos, offload, schedule, sync,
                runtime=name != "eager", placement=placement,
                trace=trace if trace is not original else None)


def distance_schedule(offload: tuple[tuple[str, ...], ...], k: int) -> tuple[int, ...]:
    """NOTE [prefetch distance]
    Later runtimes prefetch by a fixed distance rather than by findPrefetchLayer's scan to
    the next conv: layer j's offloaded buffers come back during the backward pass of layer
    j + k, k layers before j's own backward needs them (k = 1: the layer right above). An
    offloading layer within k of the top has no such layer and fetches on demand."""
    n = len(offload)
    schedule = [-1] * n
    for j, bufs in enumerate(offload):
        if bufs and j + k < n:
            schedule[j + k] = j
    return tuple(schedule)


def eager(trace: Trace, gpu: GPU, capacity: int | None, options: dict[str, Any],
          ctx: PolicyContext = NO_CONTEXT) -> Plan:
    opts = dict(options)
    common_options("eager", opts, trace)
    check_options("eager", opts, set())
    return vdnn_plan(trace, "none", algo_choice(trace, "p"), True, "eager")
