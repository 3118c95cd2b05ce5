"""A mixed-integer linear program as lists of variables and sparse rows, solved by HiGHS
(``scipy.optimize.milp``) with its solver's own output held back."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Program:
    names: list[str] = field(default_factory=list)
    binary: list[bool] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    rows: list[dict[int, float]] = field(default_factory=list)
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)

    def var(self, name: str, binary: bool, cost: float = 0.0) -> int:
        self.names.append(name)
        self.binary.append(binary)
        self.cost.append(cost)
        return len(self.names) - 1

    def row(self, coefs: dict[int, float], lo: float, hi: float) -> int:
        self.rows.append(coefs)
        self.lo.append(lo)
        self.hi.append(hi)
        return len(self.rows) - 1

    def solve(self, time_limit_s: float) -> tuple[np.ndarray | None, bool]:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_array

        nv = len(self.names)
        data, ri, ci = [], [], []
        for r, coefs in enumerate(self.rows):
            for c, v in coefs.items():
                if v:
                    ri.append(r)
                    ci.append(c)
                    data.append(v)
        a = csr_array((data, (ri, ci)), shape=(len(self.rows), nv))
        ub = np.array([1.0 if b else np.inf for b in self.binary])
        with _quiet():
                res = milp(np.array(self.cost), integrality=np.array(self.binary, dtype=int),
                       bounds=Bounds(np.zeros(nv), ub),
                       constraints=LinearConstraint(a, np.array(self.lo), np.array(self.hi)),
                       options={"time_limit": time_limit_s, "mip_rel_gap": 0.0,
                                "disp": False})
        if res.x is None:
            return None, False
        return res.x, res.status == 0


@contextlib.contextmanager
def _quiet():
    """HiGHS's MIP solver prints an occasional line of its own to the process's stdout
    (C++, past ``disp=False``): hold file descriptor 1 shut while it runs."""
    try:
        sys.stdout.flush()
        fd = os.dup(1)
    except (OSError, ValueError):  # no real stdout (a notebook kernel's, say)
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(fd, 1)
        os.close(fd)
