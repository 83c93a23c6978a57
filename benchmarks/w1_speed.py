"""Speed and memory of the W1 library: ``python -m benchmarks.w1_speed [--quick] [--options]``.

Targets (2 columns): exact W1 at 10^4 x 10^4 points in under 20 s; the certified bracket
(lower + upper bound) on 10^7 vs 10^6 rows in under 20 s and 4 GiB peak memory.
Each case runs in a fresh process so that its peak RSS (ru_maxrss) is its own; "data" is the
RSS after imports and data generation, before the timed call. Not a unit test: timings depend
on the machine and its load. `--options` also times the exact-solver alternatives that were
considered (slow: about two minutes more).
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np


def _uniform(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, 2)), rng.random((m, 2))


def _clusters(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian clusters with weights 1/2-1/2 vs 3/10-7/10: mass must cross between them."""
    rng = np.random.default_rng(seed)

    def draw(k: int, p: float) -> np.ndarray:
        centre = np.where(rng.random((k, 1)) < p, 0.3, 0.7)
        return np.clip(centre + 0.05 * rng.standard_normal((k, 2)), 0.0, 1.0)

    return draw(n, 0.5), draw(m, 0.3)


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _exact(X: np.ndarray, Y: np.ndarray) -> float:
    from dpsynth_cli.evaluate.w1 import w1_exact

    return w1_exact(X, Y)


def _bracket(X: np.ndarray, Y: np.ndarray) -> str:
    from dpsynth_cli.evaluate.w1 import w1_lower_bound, w1_upper_bound

    start = time.perf_counter()
    low = w1_lower_bound(X, Y)
    mid = time.perf_counter()
    high = w1_upper_bound(X, Y)
    end = time.perf_counter()
    return f"[{low:.5f}, {high:.5f}] (lower {mid - start:.1f} s, upper {end - mid:.1f} s)"


def _pot_dist_then_emd(X: np.ndarray, Y: np.ndarray) -> str:
    import ot

    start = time.perf_counter()
    cost = ot.dist(X, Y, metric="chebyshev")
    mid = time.perf_counter()
    value = ot.emd2([], [], cost, numItermax=10**12)
    return f"{value:.10f} (ot.dist {mid - start:.1f} s)"


def _assignment(X: np.ndarray, Y: np.ndarray) -> float:
    from scipy.optimize import linear_sum_assignment

    from dpsynth_cli.evaluate.w1 import chebyshev_cost

    cost = chebyshev_cost(X, Y)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def _lazy_rotated_l1(X: np.ndarray, Y: np.ndarray) -> float:
    """2-D only: max(|dx|, |dy|) = |du| + |dv| for u = (x + y)/2, v = (x - y)/2."""
    import ot

    turn = np.array([[0.5, 0.5], [0.5, -0.5]])
    return float(
        ot.lp.emd2_lazy(
            X @ turn.T, Y @ turn.T, metric="cityblock", numItermax=10**12, return_matrix=False
        )
    )


def _warm_started(X: np.ndarray, Y: np.ndarray) -> str:
    """Dense emd2 restarted from the optimal potentials: an upper limit on warm-start gains."""
    import ot

    from dpsynth_cli.evaluate.w1 import chebyshev_cost

    cost = chebyshev_cost(X, Y)
    _, log = ot.emd2([], [], cost, numItermax=10**12, log=True)
    start = time.perf_counter()
    value = ot.emd2([], [], cost, numItermax=10**12, potentials_init=(log["u"], log["v"]))
    return f"{value:.10f} (warm solve alone {time.perf_counter() - start:.1f} s)"


DATA: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    "uniform": _uniform,
    "clusters": _clusters,
}
TASKS: dict[str, Callable[[np.ndarray, np.ndarray], object]] = {
    "w1_exact": _exact,
    "bracket": _bracket,
    "ot.dist + ot.emd2": _pot_dist_then_emd,
    "linear_sum_assignment": _assignment,
    "emd2_lazy, rotated L1": _lazy_rotated_l1,
    "emd2 warm start": _warm_started,
}


def _child(task: str, data: str, n: int, m: int) -> tuple[float, str, float, float]:
    import ot  # noqa: F401  (imports are not part of the timing)
    import scipy.optimize  # noqa: F401

    import dpsynth_cli.evaluate.w1  # noqa: F401

    X, Y = DATA[data](n, m)
    before = _rss_gib()
    start = time.perf_counter()
    value = TASKS[task](X, Y)
    seconds = time.perf_counter() - start
    shown = f"{value:.10f}" if isinstance(value, float) else str(value)
    return seconds, shown, before, _rss_gib()


def run(task: str, data: str, n: int, m: int) -> tuple[float, str, float, float]:
    """One case in a fresh process: (seconds, value, RSS GiB with data, peak RSS GiB)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_child, task, data, n, m).result()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller sizes")
    parser.add_argument("--options", action="store_true", help="also time the alternatives")
    args = parser.parse_args(argv)
    k = 10 if args.quick else 1
    cases = [
        ("w1_exact", "uniform", 10_000 // k, 10_000 // k),
        ("w1_exact", "clusters", 10_000 // k, 10_000 // k),
        ("w1_exact", "clusters", 10_000 // k, 7_000 // k),
        ("bracket", "uniform", 10_000_000 // k, 1_000_000 // k),
        ("bracket", "clusters", 10_000_000 // k, 1_000_000 // k),
    ]
    if args.options:
        cases += [
            (task, data, 10_000 // k, 10_000 // k)
            for task in list(TASKS)[2:]
            for data in ("uniform", "clusters")
        ]
    print(
        f"{'task':24s} {'data':9s} {'n':>10s} {'m':>10s} {'seconds':>8s} "
        f"{'data GiB':>9s} {'peak GiB':>9s}  value"
    )
    for task, data, n, m in cases:
        seconds, value, before, peak = run(task, data, n, m)
        print(
            f"{task:24s} {data:9s} {n:10d} {m:10d} {seconds:8.1f} {before:9.2f} {peak:9.2f}  "
            f"{value}",
            flush=True,
        )


if __name__ == "__main__":
    main()
