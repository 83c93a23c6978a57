"""Speed of the exact discrete Laplace sampler: ``python -m benchmarks.noise_speed``.

Target: at least 5 million draws per second with the secure source for scales in [1, 10**4].
Not a unit test: timings depend on the machine and its load.
"""

from __future__ import annotations

import time
from fractions import Fraction

from dpsynth_cli.privacy.noise import RandomSource, as_scale, discrete_laplace

SCALES: tuple[Fraction, ...] = (
    Fraction(1),
    as_scale(3.7),  # t/s = 969933/262144: large numerator and a division by s
    Fraction(100),
    as_scale(1234.567),  # t > 2**28: one CKS coin per word
    Fraction(10**4),
)


def draws_per_second(source: RandomSource, scale: Fraction, n: int, repeats: int = 3) -> float:
    """Best of ``repeats`` timings of ``n`` draws (best-of filters out other load on the host)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        discrete_laplace(source, scale, n)
        best = min(best, time.perf_counter() - start)
    return n / best


def benchmark_draws(n: int = 5_000_000, scales: tuple[Fraction, ...] = SCALES) -> dict[str, float]:
    """Draws per second for the secure and the seeded source: the slowest of ``scales``."""
    sources = {"secure": RandomSource.secure(), "seeded": RandomSource.seeded(0)}
    return {
        name: min(draws_per_second(src, scale, n) for scale in scales)
        for name, src in sources.items()
    }


def main(n: int = 5_000_000) -> None:
    for name, src in (("secure", RandomSource.secure()), ("seeded", RandomSource.seeded(0))):
        for scale in SCALES:
            rate = draws_per_second(src, scale, n)
            print(f"{name:7s} scale {float(scale):>10.4f}  {rate / 1e6:6.2f} M draws/s")


if __name__ == "__main__":
    main()
