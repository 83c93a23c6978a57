"""Unit tests of the DP bounds estimate (``dpsynth_cli.mechanisms.bounds``).

Accuracy tolerances come from the module's own analysis (the false-pass probabilities its
thresholds are built for, and discrete Laplace tails), evaluated on seeded batches of
independent releases (``bounds.release(..., copies=K)``, the code path of ``estimate_bounds``).
Its privacy audit is in ``tests/test_privacy_audits.py``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import gamma

from dpsynth_cli.errors import DataError
from dpsynth_cli.mechanisms import bounds
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger
from tests.conftest import SECRET

EPS = Fraction(1)
COPIES = 400
EDGES = bounds.bin_edges()
LIMIT = 2.0**bounds.LARGEST_EXPONENT


def src(name: str) -> noise.RandomSource:
    return noise.RandomSource.seeded(20261124).spawn(name)


def batch(values, name: str, eps: Fraction = EPS, copies: int = COPIES, relation="add-remove"):
    lo, hi, _ = bounds.release(np.asarray(values, float), eps, relation, src(name), copies)
    return lo, hi


def binomial_slack(p: float, k: int) -> float:
    """Four standard deviations of a share estimated from k independent copies."""
    return 4 * math.sqrt(p * (1 - p) / k)


def test_grid_is_a_public_partition():
    assert EDGES.size - 1 == 409 and np.all(np.diff(EDGES) > 0)
    assert EDGES[0] == -LIMIT and EDGES[-1] == LIMIT
    widths = np.diff(EDGES) / bounds.SUB_BINS  # sub-bin edges are exact binary fractions
    assert np.all(EDGES[:-1] + widths * bounds.SUB_BINS == EDGES[1:])


def test_plan_splits_epsilon_exactly_and_rounds_scales_up():
    for relation, sens in (("add-remove", 1), ("replace", 2)):
        eps = Fraction(1, 3)
        p = bounds.plan(eps, relation)
        assert p.sensitivity == sens
        assert p.epsilon_find + p.epsilon_refine == eps
        assert p.epsilon_find == eps * bounds.FIND_SHARE
        for scale, e in ((p.scale_find, p.epsilon_find), (p.scale_refine, p.epsilon_refine)):
            assert sens / e <= scale <= sens / e + Fraction(1, 2**20)


def test_histograms_place_every_value_in_one_cell():
    values = np.array([math.inf, -math.inf, 1e308, -1e308, math.nan, 0.0, -0.0, 5.5, 5e-324])
    h = bounds.histograms(values)
    assert h.shape == (409, bounds.SUB_BINS)
    assert h.sum() == values.size - 1  # NaN counts nowhere
    assert h[-1].sum() == 2 and h[0].sum() == 2  # +inf, 1e308 / -inf, -1e308: outermost bins
    zero_bin = int(np.searchsorted(EDGES, 0.0, side="right")) - 1
    assert h[zero_bin].sum() == 3  # 0, -0 and the subnormal
    five = int(np.searchsorted(EDGES, 5.5, side="right")) - 1  # [5, 6): sub-bin 8
    assert EDGES[five] == 5 and h[five, 8] == 1


@pytest.mark.parametrize("relation", ["add-remove", "replace"])
@pytest.mark.parametrize(
    "column",
    [
        [math.inf] * 50,
        [-math.inf] * 50,
        [1e308] * 50,
        [-1e308, 1e308] * 25,
        [math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324] * 20 + list(np.linspace(0, 1, 500)),
        [math.nan] * 10,
        [],
        [SECRET],
    ],
    ids=["inf", "-inf", "1e308", "+-1e308", "mixed", "all NaN", "empty", "one row"],
)
def test_no_value_can_crash_it(column, relation):
    """Any value gives bounds inside the grid, or the DataError of an empty release."""
    for seed in range(3):
        ledger = Ledger(Fraction(2), relation)
        source = src(f"crash/{relation}/{seed}")
        try:
            lo, hi = bounds.estimate_bounds(np.array(column, float), "x", EPS, source, ledger)
        except DataError as err:
            assert "987654" not in str(err)
            assert ledger.spends[0].released == {}
            continue
        assert -LIMIT <= lo < hi <= LIMIT and math.isfinite(lo) and math.isfinite(hi)


def test_the_error_points_to_declared_bounds_first():
    ledger = Ledger(Fraction(1))
    with pytest.raises(DataError) as err:
        bounds.estimate_bounds(np.array([SECRET]), "income", Fraction(1, 100), src("msg"), ledger)
    text = str(err.value)
    assert text.startswith(
        "column 'income' has no bounds: declare them with --bounds income=LOWER:UPPER or in "
        "--schema, where a text column is a category with its levels"
    )
    assert "--bounds-eps" in text and "--columns" in text and "987654" not in text
    notice = bounds.estimated_notice("year", Fraction(1, 10), 2000.0, 2016.0)
    assert notice.startswith(
        "column 'year' has no declared bounds: declare them with --bounds year=LOWER:UPPER or in "
        "--schema"
    )
    assert "2000:2016 at epsilon 0.1" in notice
    assert f"roughly {bounds.rows_needed(Fraction(1, 100))} of them" in text
    assert ledger.spent == Fraction(1, 100)  # the spend is recorded even when nothing is found


def test_ledger_records_one_spend_and_release_is_estimate_bounds():
    values = np.random.default_rng(1).normal(50, 5, 3000)
    for relation in ("add-remove", "replace"):
        ledger = Ledger(Fraction(2), relation)
        lo, hi = bounds.estimate_bounds(values, "x", EPS, src(f"ledger/{relation}"), ledger)
        (spend,) = ledger.spends
        p = bounds.plan(EPS, relation)
        assert spend.step == "bounds:x" and spend.epsilon == EPS
        assert spend.sensitivity == p.sensitivity
        assert spend.noise == p.to_json() and spend.released == {"lower": lo, "upper": hi}
        same = bounds.release(values, EPS, relation, src(f"ledger/{relation}"))
        assert (same[0][0], same[1][0]) == (lo, hi)


def test_empty_columns_are_rarely_found():
    """An empty grid passes step 1 with probability < FALSE_BIN_PROBABILITY (union bound)."""
    lo, _ = batch([], "empty", copies=2000)
    found = float(np.mean(~np.isnan(lo)))
    assert found <= bounds.FALSE_BIN_PROBABILITY + binomial_slack(0.01, 2000)


def test_a_column_of_three_years_gets_one_sub_bin():
    """3000 rows on 2007-2009, eps 1: 2000-2016 unless a false pass (module analysis).

    Steps: the bin [1792, 2048) always passes (3000 >> 12); its left or right neighbour joins
    with probability <= EXTEND_PROBABILITY each; some empty bin passes a core threshold with
    probability <= FALSE_BIN_PROBABILITY; the edge bin's noisy count (~3000) exceeds the
    sub-bin threshold (104), the sub-bin [2000, 2016) always passes it, one of the 15 empty
    sub-bins passes with probability <= FALSE_SUB_BIN_PROBABILITY * 15/32; cutting 13 empty
    sub-bins off is refused when their noise sum exceeds 60 + 2 sd (2.7 sd: < 0.005).
    """
    years = np.random.default_rng(2).choice([2007.0, 2008.0, 2009.0], 3000)
    lo, hi = batch(years, "years")
    miss = (
        2 * bounds.EXTEND_PROBABILITY
        + bounds.FALSE_BIN_PROBABILITY
        + bounds.FALSE_SUB_BIN_PROBABILITY * 15 / 32
        + 0.005
    )
    exact = float(np.mean((lo == 2000) & (hi == 2016)))
    assert exact >= 1 - miss - binomial_slack(miss, COPIES)
    assert np.all((lo <= 2007) & (hi > 2009))  # the rows themselves are never cut off


def test_the_bulk_is_kept_and_few_rows_are_clamped():
    """Normal column, n = 20000, eps 1: a guaranteed run of bins stays inside the bounds.

    A bin with c rows stops the outward growth (noisy count <= extension threshold) with
    probability <= exp(-(c - grow) / scale) / 2, below 1e-5 once c >= grow + 12 scale, so the
    run of such bins around the mode is inside [lower, upper]. Refining cuts at most
    TRIM_SHARE of an edge bin's noisy count plus 2 sd of the noise sum of the sub-bins cut,
    whose true count exceeds that by more than 4 sd (sd <= sqrt(2 * 15) * scale_refine) with
    probability < 1e-4.
    """
    values = np.random.default_rng(3).normal(100, 15, 20_000)
    p = bounds.plan(EPS, "add-remove")
    counts = bounds.histograms(values).sum(1)
    strong = counts >= p.extend + 12 * float(p.scale_find)
    mode = int(np.argmax(counts))
    first = last = mode
    while strong[first - 1]:
        first -= 1
    while strong[last + 1]:
        last += 1
    lo, hi = batch(values, "normal")
    assert np.all((lo <= EDGES[first + 1]) & (hi >= EDGES[last]))
    sd = math.sqrt(2 * 15) * float(p.scale_refine)
    outside = counts[:first].sum() + counts[last + 1 :].sum()
    per_side = bounds.TRIM_SHARE * counts[first : last + 1].max() + 6 * sd
    clamped = np.array([np.sum((values < a) | (values > b)) for a, b in zip(lo, hi, strict=True)])
    assert np.all(clamped <= outside + 2 * per_side)
    # far from the data only through false passes: two empty neighbours in a row or a core bin
    left_gap = lo < EDGES[max(np.flatnonzero(counts)[0] - 1, 0)]
    assert float(np.mean(left_gap)) <= 0.0025 + 0.01 + binomial_slack(0.0125, COPIES)


def test_lower_bound_snaps_to_zero_only_near_zero():
    rng = np.random.default_rng(4)
    values = rng.uniform(0, 1000, 20_000)
    lo, hi = batch(values, "uniform")
    assert np.all(lo == 0)  # the bins below 128 are too thin to pass: 0 instead
    # The top sub-bin [992, 1000) of the edge bin holds c rows; it fails its threshold t iff
    # its noise Z <= t - c, P = p^(c-t) / (1 + p), p = exp(-1/scale); only then is it cut off.
    p = bounds.plan(EPS, "add-remove")
    c = int(np.sum((values >= 992) & (values < 1000)))
    ratio = math.exp(-1 / float(p.scale_refine))
    miss = ratio ** (c - p.sub_bin) / (1 + ratio)
    assert np.all(hi >= 984)
    assert float(np.mean(hi < 1000)) <= miss + binomial_slack(miss, COPIES)
    lo, _ = batch(rng.uniform(500, 1000, 20_000), "uniform-500")
    # snapping needs lower <= upper / 8 (about 128): only after a false core pass far left
    assert float(np.mean(lo == 0)) <= bounds.FALSE_BIN_PROBABILITY + binomial_slack(0.01, COPIES)
    lo, hi = batch(-rng.uniform(0, 1000, 20_000), "negative")
    assert np.all(hi == 0) and np.all(lo <= -984)  # mirrored: the same analysis


def test_replace_doubles_the_noise():
    a = bounds.plan(EPS, "add-remove")
    b = bounds.plan(EPS, "replace")
    grid = Fraction(1, 2**20)  # as_scale rounds each scale up onto this grid
    assert 2 * a.scale_find - grid <= b.scale_find <= 2 * a.scale_find + grid
    assert b.scale_refine == 2 * a.scale_refine
    assert b.windows[0][1] > a.windows[0][1] and b.sub_bin > a.sub_bin


@pytest.mark.parametrize("width", [2, 3, 4])
def test_laplace_sum_tail_closed_form(width):
    for x in (0.5, 3.0, 12.0):
        numeric = integrate.quad(
            lambda b, x=x: gamma.pdf(b, width) * gamma.sf(x + b, width),
            0,
            np.inf,
            epsabs=0,
            epsrel=1e-12,
        )[0]
        assert bounds.laplace_sum_tail(width, x) == pytest.approx(numeric, rel=1e-9)


def test_window_threshold_bounds_the_noise_sum():
    """P(sum of 2 draws > T) <= 5% (valid), and not far below it (useful): 10^5 sampled sums."""
    scale = Fraction(3)
    t = bounds.window_threshold(scale, 2, 1, 0.05)
    z = noise.discrete_laplace(src("window"), scale, 200_000).reshape(-1, 2).sum(1)
    share = float(np.mean(z > t))
    assert share <= 0.05 and share >= 0.015
    assert bounds.window_threshold(scale, 1, 409, 0.01) == bounds.threshold(scale, 409, 0.01)
