"""The fitting routines the cost models share (numpy, offline): least squares on the
relative error, the utilization model's ridge regression, batch norm's grid search, a
fit's error on its own data and seeded cross-validation. Each takes numpy as ``np`` so
that importing a cost model needs no numpy."""

from __future__ import annotations

import statistics
from typing import Any, Callable

RIDGE = 1.0  # shrinkage of the utilization model's coefficients (not the intercept)
FOLDS = 5


def weighted_lstsq(A, y, w, np) -> Any:
    """Least squares of ``A x = y`` with row weights ``w``."""
    return np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0]


def nonneg_rel_lstsq(A, t, np) -> list[float]:
    """Least squares on the relative error weighted by sqrt(time) (long kernels weigh more:
    a step is their sum), coefficients clipped at 0 (refit without)."""
    w = 1.0 / np.sqrt(t)
    active = list(range(A.shape[1]))
    coef = np.zeros(A.shape[1])
    while active:
        sol = weighted_lstsq(A[:, active], t, w, np)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active = [j for j, v in zip(active, sol) if v > 0]
    return [float(v) for v in coef]


def nonneg_lstsq(X, y, np) -> Any:
    """Plain least squares; the first negative coefficient is held at zero and the rest
    refitted once."""
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    for k in range(X.shape[1]):
        if coef[k] < 0:
            keep = [j for j in range(X.shape[1]) if j != k]
            coef = np.zeros(X.shape[1])
            coef[keep] = np.linalg.lstsq(X[:, keep], y, rcond=None)[0]
            break
    return coef


def fit_util(rows, t, np, ridge: float = RIDGE) -> dict[str, Any]:
    """The utilization model: logit(roofline / time) linear in the features ``rows``
    ((features, roofline ns) per case), by ridge regression weighted toward long kernels
    (NOTE [kernel model])."""
    X = np.array([f for f, _ in rows])
    roof = np.array([r for _, r in rows])
    u = np.clip(roof / t, 1e-4, 0.999)
    y = np.log(u / (1 - u))
    w = np.sqrt(t) / np.sqrt(t).mean()  # long kernels weigh more: a step is their sum
    mu, sd = X.mean(0), X.std(0)
    sd[sd == 0] = 1.0
    mu[0], sd[0] = 0.0, 1.0
    Z = (X - mu) / sd
    reg = ridge * np.eye(Z.shape[1])
    reg[0, 0] = 0.0
    beta = np.linalg.solve(Z.T @ (Z * w[:, None]) + reg, Z.T @ (w * y))
    return {"kind": "util", "beta": [float(b) for b in beta], "mu": [float(v) for v in mu],
            "sd": [float(v) for v in sd]}


def fit_bn(sizes, t, np) -> dict[str, Any]:
    """Batch norm: ``t = a + max(channel bytes / k, bytes / b)`` over ``sizes`` ((bytes,
    bytes of one channel) per case). A block reduces each channel, so a few long channels
    run at a rate per channel (``k``), many at a share of DRAM bandwidth (``b``). Grid
    search on the squared log error, long kernels weighted."""
    sizes = np.array(sizes)
    logt, wt = np.log(t), np.sqrt(t) / np.sqrt(t).sum()
    ks = np.logspace(-0.5, 1.5, 41)[:, None, None]  # bytes/ns of one channel
    bs = np.logspace(1.5, 3.7, 45)[None, :, None]  # bytes/ns of the whole tensor
    best = (np.inf, {})
    for a in (0.0, 1000.0, 2000.0, 3000.0, 4500.0, 6500.0):
        pred = a + np.maximum(sizes[:, 1] / ks, sizes[:, 0] / bs)
        loss = (((np.log(pred) - logt) ** 2) * wt).sum(axis=2)
        i, j = np.unravel_index(np.argmin(loss), loss.shape)
        if loss[i, j] < best[0]:
            best = (float(loss[i, j]), {"kind": "bn", "a": a, "k": float(ks[i, 0, 0]),
                                        "b": float(bs[0, j, 0])})
    return best[1]


def fit_error(pred, t, np) -> dict[str, Any]:
    """A fit's relative error on its own cases: count, median and 90th percentile."""
    rel = np.abs(np.array(pred) / t - 1)
    return {"n": int(len(t)), "median": round(float(np.median(rel)), 4),
            "p90": round(float(np.quantile(rel, 0.9)), 4)}


def cross_validate(n: int, fit_predict: Callable[[list[int], list[int]], list[float]]
                   ) -> float:
    """5-fold cross-validation (seeded): the median |error| of ``fit_predict(train,
    test)``'s relative errors over the held-out folds."""
    import random

    idx = list(range(n))
    random.Random(0).shuffle(idx)
    errs: list[float] = []
    for k in range(FOLDS):
        test = idx[k::FOLDS]
        errs += fit_predict([i for i in idx if i not in test], test)
    return statistics.median(errs)
