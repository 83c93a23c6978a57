"""Does the release carry signal? A check of the synthetic points alone (post-processing).

When eps * n is small against the number of cells a d-dimensional partition needs, every
mechanism here falls back to (nearly) uniform mass on the bounds: the output is then noise, and
a user must be told rather than handed a plausible-looking file. The check reads only the
released points in [0,1]^d, so it costs no privacy: a column counts as uniform when the
Kolmogorov-Smirnov distance of its synthetic values from U[0,1] is below what a uniform sample of
that size shows with probability UNIFORM_LEVEL (an asymptotic critical value, c / sqrt(m)). Data
that really are uniform on their bounds look the same: the notice says so.

A boolean or category column is tested (the report lists it, and it counts towards "every
column uniform") but never named alone in a notice: the mechanisms spread a level's mass
uniformly over its slots, so its KS distance tests only whether the level shares equal the
slots' widths. For two levels, whether the shares are 50/50 within 1.63/sqrt(rows): a balanced
column (sex, a coin-flip treatment) and a faithful release of it pass, so the test is no
evidence that the release lacks signal there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

KS_CRITICAL = 1.63  # c(alpha) of the Kolmogorov distribution at alpha = 0.01
UNIFORM_LEVEL = 0.99
MIN_ROWS = 50  # below this, a KS test cannot tell a release from noise: no verdict
MAX_ROWS = 100_000  # rows tested at most (sorting all of a 10^6 x 30 output costs seconds)
RESOLVABLE_SCALES = 10.0  # see `resolvable`
STRONG_EPSILON = 10.0  # above this, the guarantee is weak (e^10 ~ 22,000 likelihood ratio)
DROPPED_SHARE = 0.2  # a column is named when this share of the released rows was dropped at it
DROPPED_FALSE_ALARM = 0.01  # chance that some column without drops passes `dropped_floor`
# Why a column's cells were unusable, by its declared type; and what to check.
UNUSABLE = {
    "float": "cells that are not numbers, or empty",
    "integer": "cells that are not whole numbers, or empty",
    "boolean": "cells that are not true/false, or empty",
    "category": "values not among its levels, or empty",
    "date": "cells that are not dates, or empty",
    "datetime": "cells that are not date-times, or empty",
}
CHECK = {
    "float": "check --decimal, --delimiter, or the schema's type for it",
    "integer": "check --decimal, --delimiter, or the schema's type for it",
    "category": 'declare its missing levels (or an "other" level, or "nullable") in the schema',
}
CHECK_DEFAULT = 'check --delimiter, or the schema\'s type for it (or "nullable")'


def uniform_columns(points: np.ndarray) -> list[int] | None:
    """Indices of the columns whose synthetic values are indistinguishable from U[0,1]; None
    when there are too few points to tell. Beyond MAX_ROWS an evenly strided subset is tested
    (a systematic sample; the test's resolution, 1/sqrt(MAX_ROWS), is ample)."""
    m = points.shape[0]
    if m < MIN_ROWS:
        return None
    if m > MAX_ROWS:
        points = points[:: -(-m // MAX_ROWS)]
        m = points.shape[0]
    ordered = np.sort(points, axis=0)
    ranks = np.arange(1, m + 1)[:, None]
    ks = np.maximum(ranks / m - ordered, ordered - (ranks - 1) / m).max(axis=0)
    return np.flatnonzero(ks < KS_CRITICAL / math.sqrt(m)).tolist()


def signal_block(
    points: np.ndarray,
    names: list[str],
    w1_bound: float | None,
    *,
    noisy_rows: int | None = None,
    empty_floor: int | None = None,
    eps_rows: float | None = None,
    rows_dropped: bool = False,
    level_columns: tuple[int, ...] = (),
) -> tuple[dict[str, Any], list[str]]:
    """The report's `accuracy.signal` block and the notices for the user.

    Besides the output, it reads released or public numbers only: the noisy row count against
    `empty_floor` (the noisy count an empty table exceeds with probability below 1%,
    `count.empty_floor`): at or below it, the release is mostly noise; and `eps_rows`, the
    mechanism's epsilon times the noisy count, which says whether a release could have shown
    structure (`resolvable`) when every column came out uniform. `rows_dropped`: a released
    per-column dropped count named a column (`dropped_notices`): then a release that is mostly
    noise is so because rows were dropped, not for want of --eps or rows. `level_columns`
    (boolean and category columns) are never named alone in the notice (module docstring)."""
    uniform = uniform_columns(points)
    vacuous = w1_bound is not None and w1_bound >= 1.0
    block: dict[str, Any] = {
        "uniform_columns": None if uniform is None else [names[j] for j in uniform],
        "test": f"Kolmogorov-Smirnov distance of each synthetic column from uniform on its "
        f"bounds below {KS_CRITICAL}/sqrt(rows) (a uniform sample passes with probability "
        f"{UNIFORM_LEVEL}); computed from the output only",
    }
    noise_only = noisy_rows is not None and empty_floor is not None and noisy_rows <= empty_floor
    if empty_floor is not None:
        block["mostly_noise"] = noise_only
        block["empty_table_floor"] = empty_floor
        block["empty_table_floor_note"] = (
            "a table without rows gives a noisy row count above this with probability below "
            "1%; a release sized at or below it is mostly noise (post-processing of the count)"
        )
    every = uniform is not None and len(uniform) == len(names) and len(names) > 1
    thin = every and not resolvable(eps_rows, len(names))
    block["little_signal"] = noise_only or vacuous or thin
    if noise_only:
        advice = (
            " because rows were dropped (see the note naming the columns); fix how they are "
            "read rather than raising --eps"
            if rows_dropped
            else "; use a larger --eps, or more rows"
        )
        return block, [
            f"the noisy row count is {noisy_rows}, within the noise of an empty table (one "
            f"without rows gives more than {empty_floor} with probability below 1%): the "
            f"release is mostly noise{advice}"
        ]
    if vacuous or thin:
        why = (
            "its a-priori W1 bound is vacuous"
            if vacuous
            else "every synthetic column is uniform on its bounds"
        )
        return block, [
            f"the release carries little signal ({why}): with {len(names)} columns the budget "
            "is spread too thin; use fewer columns (--columns), a larger --eps, or more rows"
        ]
    if every:
        return block, [
            "every synthetic column is uniform on its bounds; at this --eps and row count a "
            "release would show structure, so the data are probably close to uniform there too"
        ]
    named = [j for j in uniform or [] if j not in level_columns]
    if named:
        listed = ", ".join(f"'{names[j]}'" for j in named)
        return block, [
            f"synthetic columns uniform on their bounds: {listed} (either the data are, or the "
            "release holds no signal there)"
        ]
    return block, []


def resolvable(eps_rows: float | None, d: int) -> bool:
    """Could a release show structure? Yes when the 2^d cells that halve every column once
    would hold RESOLVABLE_SCALES noise scales each on average (eps x noisy rows / 2^d): a
    column that is not uniform then shows in any mechanism's output. Unknown: no."""
    return eps_rows is not None and eps_rows / 2.0 ** min(d, 60) >= RESOLVABLE_SCALES


def weak_guarantee_notice(epsilon: float) -> list[str]:
    if epsilon <= STRONG_EPSILON:
        return []
    return [
        f"--eps {epsilon:g} is above {STRONG_EPSILON:g}: the privacy guarantee is weak (one "
        "person's presence may change an outcome's probability by a factor up to e^eps)"
    ]


def dropped_floor(scale: float, columns: int) -> int:
    """A released dropped count above this is, with probability at least 1 - DROPPED_FALSE_ALARM
    over all `columns` cells together, not noise around an empty cell: P(Z > t) < exp(-t/s)
    for the discrete Laplace noise of scale s, and a union bound over the columns."""
    return math.ceil(scale * math.log(max(columns, 1) / DROPPED_FALSE_ALARM))


def dropped_notices(
    specs: list[Any], noisy_rows: int, dropped: dict[str, int], scale: float
) -> tuple[list[str], bool]:
    """Notices naming each column at which a large share of the rows was dropped (their cells
    missing or not values of the declared type), and whether any was named. Decided from
    released values only: the noisy row count and the noisy per-column dropped counts
    (`count.noisy_tally`), against public thresholds (DROPPED_SHARE of the released total, and
    `dropped_floor` of the noise `scale`)."""
    total = noisy_rows + sum(dropped.values())
    floor = dropped_floor(scale, len(dropped))
    notices = []
    for spec in specs:
        got = dropped.get(spec.name, 0)
        if total <= 0 or got <= floor or got < DROPPED_SHARE * total:
            continue
        why = UNUSABLE.get(spec.kind, "cells that are not values of its type, or empty")
        check = CHECK.get(spec.kind, CHECK_DEFAULT)
        notices.append(
            f"about {round(100 * got / total)}% of rows were dropped at column '{spec.name}' "
            f"({why}): {check}"
        )
    return notices, bool(notices)


COLLAPSE_SHARE = 0.5  # a level that holds this share of a column's synthetic rows is named


def collapse_notices(domain: Any, points: np.ndarray) -> list[str]:
    """Notices for a category whose `other` level, or a nullable column whose missing level,
    holds most of the synthetic rows: the values are probably not read as meant (levels left
    out of the schema, cells not of the column's type). Read off the released points alone
    (post-processing, like `uniform_columns`); no verdict below MIN_ROWS points."""
    if points.shape[0] < MIN_ROWS:
        return []
    notices = []
    for j, spec in enumerate(domain.columns):
        other = spec.kind == "category" and spec.other is not None
        if not (other or spec.nullable):
            continue
        codes = domain.written_codes(points, [j])[:, 0]
        if other:
            share = float(np.mean(codes == spec.levels.index(spec.other)))
            what = f"its level '{spec.other}' (values not among its declared levels)"
            fix = "declare the levels the column holds in the schema"
        else:
            share = float(np.mean(np.isnan(codes)))
            what = "missing (empty cells, or cells that are not values of its type)"
            fix = CHECK.get(spec.kind, CHECK_DEFAULT)
        if share >= COLLAPSE_SHARE:
            notices.append(
                f"about {round(100 * share)}% of the synthetic rows of column '{spec.name}' "
                f"are {what}: {fix}"
            )
    return notices
