"""Marks in a training step of an fx-traced model: a call after each layer's forward and
before its autograd node runs (the step itself is workload.probe_step). The per-layer timing (profile.py,
NOTE [layer timing]) and the kernel counts (kernels.py, NOTE [kernel counts]) both
instrument a step this way; each imports this module, neither the other.
"""

from __future__ import annotations

from typing import Any



def instrument(gm: Any, index: dict[str, int], start: Any, after: Any) -> None:
    """Insert ``start()`` before the first node of ``gm``'s graph and ``after(k, out)``
    after each node named in ``index`` (``k`` its layer index), its result passed on."""
    graph = gm.graph
    first = next(n for n in graph.nodes if n.op != "placeholder")
    with graph.inserting_before(first):
        graph.call_function(start)
    for node in list(graph.nodes):
        if node.name in index:
            with graph.inserting_after(node):
                marked = graph.call_function(after, (index[node.name], node))
            node.replace_all_uses_with(marked, delete_user_cb=lambda u, m=marked: u is not m)
    gm.recompile()


def hook_backward(out: Any, hooked: dict[int, Any], mark: Any) -> None:
    """``mark()`` just before ``out``'s autograd node runs, once per node (a no-op view
    shares its input's); ``hooked`` holds the nodes, which keeps their ids unique."""
    fn = getattr(out, "grad_fn", None)
    if fn is not None and id(fn) not in hooked:
        hooked[id(fn)] = fn
        fn.register_prehook(lambda g: mark())
