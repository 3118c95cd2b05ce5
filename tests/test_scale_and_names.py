"""Names a trace may use, and shapes that used to cost quadratic time or a recursion."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vdnnsim import policy_names, run_trace
from vdnnsim.errors import TraceError
from vdnnsim.policies import find_prefetch_schedule
from vdnnsim.trace import trace_from_dict

from .conftest import chain_trace, hand_gpu

U = 2**20
GPU = hand_gpu(bw=U * 1000.0)


def _engine_names_trace():
    """Every tensor and layer named like something the engine allocates itself."""
    names = ["weights", "weight_grads", "workspace:c1", "grad:data", "resident",
             "grad_buffer_0", "workspace", "wgrad:c1"]
    layers = [{"id": n, "size": U, "fwd": 1000, "bwd": 1000, "weight": U, "ws": U}
              for n in names]
    return chain_trace(layers, input_bytes=U)


@pytest.mark.parametrize("framework", ["torch7", "pytorch"])
@pytest.mark.parametrize("policy", policy_names())
def test_tensor_and_layer_names_never_collide_with_the_engines(framework, policy, tmp_path):
    t = _engine_names_trace()
    t = replace(t, source=replace(t.source, framework=framework))
    opts = {}
    if policy == "planned":  # it replays a plan file: the planner's for this trace
        import yaml
        from vdnnsim.planners.greedy import plan_to_dict, search_plan
        plan, _ = search_plan(t, GPU, GPU.memory_bytes)
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan_to_dict(t, GPU, GPU.memory_bytes, plan, {})))
        opts = {"file": str(path)}
    if policy == "vdnn_blocks":  # NOTE [block offload]: each layer its own region
        t = replace(t, layers=tuple(replace(x, attrs={**x.attrs, "block": i})
                                    for i, x in enumerate(t.layers)))
    r = run_trace(t, GPU, policy, opts)
    # the run completes; each of the eight layers' weights and gradients are counted once
    assert r.weight_bytes == 2 * 8 * U
    assert r.peak_memory_bytes >= r.weight_bytes
    names = set(r.tensors.key)
    assert {"weights", "weight_grads"} <= names  # the trace's own buffers, by their ids


def test_a_long_alias_chain_loads_and_simulates():
    n = 20_000
    layers = [{"id": "c0", "size": U, "fwd": 10, "bwd": 10}]
    layers += [{"id": f"r{i}", "kind": "relu", "inplace": True, "saves": "y", "fwd": 1,
                "bwd": 1} for i in range(n)]
    t = chain_trace(layers)
    assert t.root(f"r{n - 1}") == "c0"
    r = run_trace(t, GPU, "vdnn_all_m")
    assert r.peak_memory_bytes >= U


def test_a_long_cycle_is_reported_not_a_recursion_error():
    n = 1200
    tensors = [{"id": "data", "size_bytes": 4, "kind": "input"}]
    tensors += [{"id": f"t{i}", "size_bytes": 4} for i in range(n)]
    layers = [{"id": f"l{i}", "kind": "relu", "inputs": [f"t{(i - 1) % n}"],
               "outputs": [f"t{i}"], "saved": [], "fwd_ns": 1, "bwd_ns": 1} for i in range(n)]
    data = {"format": "vdnnsim-trace", "version": 1, "name": "ring", "batch_size": 1,
            "tensors": tensors, "layers": layers}
    with pytest.raises(TraceError, match="cycle"):
        trace_from_dict(data)


def test_a_long_alias_cycle_is_reported():
    n = 5000
    tensors = [{"id": "data", "size_bytes": 4, "kind": "input"}]
    tensors += [{"id": f"a{i}", "size_bytes": 4, "alias_of": f"a{(i + 1) % n}"}
                for i in range(n)]
    layers = [{"id": "l", "kind": "relu", "inputs": ["data"], "outputs": ["a0"], "saved": [],
               "fwd_ns": 1, "bwd_ns": 1}]
    data = {"format": "vdnnsim-trace", "version": 1, "name": "alias ring", "batch_size": 1,
            "tensors": tensors, "layers": layers}
    with pytest.raises(TraceError, match="alias cycle"):
        trace_from_dict(data)


def _reference_schedule(convs, offload, marked):
    """findPrefetchLayer exactly as the paper writes it: a scan per layer."""
    n = len(convs)
    prefetched, out = [False] * n, [-1] * n
    for cur in range(n - 1, -1, -1):
        for idx in range(cur - 1, -1, -1):
            if marked[idx] and not prefetched[idx]:
                prefetched[idx] = True
                if offload[idx]:
                    out[cur] = idx
                break
            if convs[idx]:
                break
    return tuple(out)


class _Layer:
    def __init__(self, is_conv: bool):
        self.is_conv = is_conv


class _Layers:
    def __init__(self, convs):
        self.layers = [_Layer(c) for c in convs]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=40))
def test_fast_find_prefetch_layer_equals_the_papers_scan(rows):
    convs = [c for c, _, _ in rows]
    offload = tuple(("b",) if o else () for _, o, _ in rows)
    marked = tuple(bool(o) or m for (_, _, m), o in zip(rows, offload))
    t = _Layers(convs)
    assert find_prefetch_schedule(t, offload, marked) == _reference_schedule(
        convs, offload, marked)
    copies = tuple(bool(o) for o in offload)
    assert find_prefetch_schedule(t, offload) == _reference_schedule(convs, offload, copies)


class _ReferencePool:
    """CNMeM's best fit as its source writes it: scan the free list in address order,
    keep the smallest block that holds the request (the first on ties)."""

    INF = 1 << 100

    def __init__(self, capacity):
        self.capacity, self.free, self.used = capacity, [(0, self.INF)], {}

    def alloc(self, key, size):
        size = -(-size // 512) * 512
        if not size:
            return None
        for limit in (self.capacity, self.INF):
            best = None
            for i, (a, s) in enumerate(self.free):
                if s >= size and a + size <= limit and (best is None or s < self.free[best][1]):
                    best = i
            if best is not None:
                break
        a, s = self.free[best]
        self.free[best:best + 1] = [(a + size, s - size)] if s > size else []
        self.used[key] = (a, size)
        return a

    def release(self, key):
        if key not in self.used:
            return
        a, size = self.used.pop(key)
        self.free.append((a, size))
        self.free.sort()
        merged = [self.free[0]]
        for b, s in self.free[1:]:
            if merged[-1][0] + merged[-1][1] == b:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((b, s))
        self.free = merged


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 15), st.integers(0, 8 * 4096)),
                max_size=80), st.integers(1, 64 * 4096))
def test_the_indexed_pool_places_blocks_where_cnmems_scan_does(ops, capacity):
    from vdnnsim.engine.allocator import Pool
    pool, ref = Pool(capacity), _ReferencePool(capacity)
    for now, (is_alloc, k, size) in enumerate(ops):
        key = f"b{k}"
        if is_alloc and key not in ref.used:
            where = ref.alloc(key, size)
            pool.alloc(key, size, "activations", now)
            assert (pool._blocks[key][0] if key in pool else None) == where
        elif not is_alloc:
            ref.release(key)
            pool.free(key, now)
        assert pool.live_bytes == sum(s for _, s in ref.used.values())
