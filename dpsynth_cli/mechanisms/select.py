"""`--mechanism auto` (the default): choose the synthesiser from public quantities only.

The choice reads the number of columns d, the mechanism's epsilon, the neighbouring relation and
the noisy row count (released, with its spend, by `count.noisy_count`), never the rows, so it is
post-processing and costs nothing; the chosen mechanism then spends the whole mechanism epsilon
and carries its own guarantee (see its module). The rule is what `make bench-accuracy` measured
(docs/benchmarks.md, "Accuracy"): PRIVTREE_FROM[d] is the eps * noisy_rows / sensitivity from
which privtree's adaptive tree replaces the hierarchy of nested grids, the threshold that met the
0.8x-the-best-peer target in the most benchmark cells and, among those, had the best geometric
mean of the ratios. Small eps * n favours the grids (too little signal to adapt a tree to), and
d = 1 the grids everywhere (their least squares and pruning already find 1-D clusters).

PSMM (issue 12) was measured as a third candidate in all 72 cells, with its grid rule: its W1 is
1.34x auto's (geometric mean; 1.89x for d = 1, 1.19x for d = 2, 1.24x for d = 3) and below
auto's in 5 cells only, by 0.93-0.97x. In three of them (airports n = 2000 at eps 0.1 and 2,
smooth-3d n = 2000 at eps 0.5) hierarchy, the other candidate, is lower still; the other two are
n = 20000 cells at eps 2 near the subsample estimator's floor (randhie 0.0144 against 0.0150,
smooth-2d 0.0140 against 0.0145). No rule in d and eps * noisy_rows separates them from the cells
of the same d and eps * n where PSMM is 1.1-2.2x behind (clustered, randhie, diamonds). So auto
never chooses it (NEVER; the report's rule says so); `--mechanism psmm` remains for its a-priori
bound.

Level columns (boolean, category, and the missing flags of nullable float/datetime columns:
`Rows.lead`, public from the schema): privtree below the marginals rule (fewer than 4 columns
or too little signal a column), whatever eps n.
Only privtree and pmm split them first (`partition`); the grids would spread each cell's points
over all levels of a column, and on the mixed tables of docs/benchmarks.md ("Mixed tables")
privtree with levels first beat hierarchy at every eps (penguins at eps 0.5 and 1, where
eps n < 400: joint W1 in the mixed metric 0.43 / 0.35 against hierarchy's 0.62 / 0.62, before
the marginals share, which lowered privtree's to 0.45 / 0.32).

Any d runs (tests/test_mechanisms_highdim.py goes to 10,000 columns); the rule was not measured
beyond d = 5. In high dimensions both candidates cut only some columns, uniform on the others:
hierarchy 2 cells on each of the first m <= log2(eps n / sens) columns (fewer cells when its
total would not follow the noisy count), privtree halves at most its depth (<= 60) coordinates.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.mechanisms import hierarchy, pairs, privtree
from dpsynth_cli.mechanisms.base import Mechanism, MechanismRun
from dpsynth_cli.privacy.ledger import Ledger, histogram_sensitivity
from dpsynth_cli.privacy.noise import RandomSource

CANDIDATES: dict[str, Mechanism] = {
    "hierarchy": hierarchy.run,
    "privtree": privtree.run,
    "marginals": pairs.run,
}
# `marginals` from this many columns on, when each column's share of the signal,
# eps * noisy_rows / (sensitivity * columns), is at least MARGINALS_SIGNAL (measured on the real
# tables of docs/benchmarks.md: below it, penguins' 342 rows at eps 1, the pair measurements are
# too noisy to keep species x island and privtree keeps the joint better). With two or three
# columns privtree keeps the whole joint: one category and one number at 300-1,000 rows, eps 1,
# joint W1 in the mixed metric 0.027 / 0.014 against marginals' 0.123 / 0.021, equal at 20,000
# rows (docs/benchmarks.md, "Small tables with levels").
MARGINALS_FROM_COLUMNS = 4
MARGINALS_SIGNAL = 90.0
# From this many columns marginals whatever the signal (issue 37): privtree's cells cut only a few
# of many columns. On the real tables at 300-1,000 rows (eps 1, 3 seeds; docs/benchmarks.md, "Small
# wide tables and piled-up values") marginals was ahead of privtree on 4-6 of the 6 figures
# everywhere, the joint W1 included from 18 columns on (NMES1988, College, breast cancer: 0.24-0.79
# against 0.34-0.87); with 6-10 columns at low signal privtree kept the joint W1 better (flights at
# 300 rows: 0.44 against 0.62), which MARGINALS_SIGNAL still gives it. Down to a signal of
# MARGINALS_WIDE_SIGNAL a column (the sweep's least: cancer at 300 rows, 9): below it (50 rows of
# 20 columns) the noisy count itself is mostly noise and privtree's leaves keep the rows.
MARGINALS_WIDE = 12
MARGINALS_WIDE_SIGNAL = 8.0
# d -> eps * noisy_rows / sensitivity from which privtree is chosen (inf: never); other d use
# PRIVTREE_FROM_DEFAULT. Measured on the 72 benchmark cells (d = 1..3) and a check at d = 4, 5.
PRIVTREE_FROM: dict[int, float] = {1: float("inf")}
PRIVTREE_FROM_DEFAULT = 400.0
# Measured as candidates and chosen nowhere (docstring); named in the rule the report records.
NEVER = ("psmm",)


def rule_text() -> str:
    def clause(t: float) -> str:
        if t == float("inf"):
            return "hierarchy"
        return f"privtree when eps*noisy_rows/sensitivity >= {t:g}"

    parts = [f"d={d}: {clause(t)}" for d, t in sorted(PRIVTREE_FROM.items())]
    parts.append(f"other d: {clause(PRIVTREE_FROM_DEFAULT)}")
    parts.insert(0, "with boolean, category or nullable float/datetime columns: privtree")
    parts.insert(
        0,
        f"marginals with {MARGINALS_FROM_COLUMNS} to {pairs.MAX_COLUMNS} columns when "
        f"eps*noisy_rows/(sensitivity*columns) >= {MARGINALS_SIGNAL:g}, or >= "
        f"{MARGINALS_WIDE_SIGNAL:g} from {MARGINALS_WIDE} columns on",
    )
    never = f"; never {', '.join(NEVER)} (behind in the accuracy benchmark)" if NEVER else ""
    return "; ".join(parts) + "; otherwise hierarchy" + never


def choose(
    d: int,
    epsilon: Fraction,
    noisy_rows: int,
    relation: str,
    levels: bool = False,
    columns: int | None = None,
) -> str:
    """The mechanism name for these public quantities (`levels`: the table has level columns;
    `columns`: the table's columns, d less the hidden missing flags)."""
    scale = float(epsilon) / histogram_sensitivity(relation) * max(noisy_rows, 0)
    columns = d if columns is None else columns
    wide = MARGINALS_FROM_COLUMNS <= columns <= pairs.MAX_COLUMNS
    per_column = scale / max(columns, 1)
    many = columns >= MARGINALS_WIDE and per_column >= MARGINALS_WIDE_SIGNAL
    if wide and (per_column >= MARGINALS_SIGNAL or many):
        return "marginals"
    if levels:
        return "privtree"
    return "privtree" if scale >= PRIVTREE_FROM.get(d, PRIVTREE_FROM_DEFAULT) else "hierarchy"


def planned(d: int, epsilon: Fraction, relation: str, levels: bool, columns: int) -> str:
    """What `choose` will pick for these public facts, by the noisy count still to come (the
    `--dry-run` plan's words: the rule applied to the declared columns)."""
    per_row = float(epsilon) / histogram_sensitivity(relation)  # eps / sensitivity
    if per_row <= 0:
        return "no rows can be synthesised without a mechanism epsilon"
    kinds = (
        "with level columns (boolean, category or nullable float/datetime)"
        if levels
        else ("of numbers only")
    )
    head = f"auto on {'these ' + str(columns) + ' columns' if columns != 1 else 'this column'} "
    head += f"{kinds}: "
    if levels:
        below = "privtree"
    else:
        start = PRIVTREE_FROM.get(d, PRIVTREE_FROM_DEFAULT)
        if start == float("inf"):
            below = "hierarchy"
        else:
            rows = math.ceil(start / per_row)
            below = f"privtree from a noisy count of {rows:,} rows, hierarchy below"
    if MARGINALS_FROM_COLUMNS <= columns <= pairs.MAX_COLUMNS:
        wide = columns >= MARGINALS_WIDE
        signal = MARGINALS_WIDE_SIGNAL if wide else MARGINALS_SIGNAL
        rows = math.ceil(signal * columns / per_row)
        return head + f"marginals from a noisy count of {rows:,} rows; below it {below}"
    return head + below


def candidates(d: int, levels: bool, columns: int) -> tuple[str, ...]:
    """The mechanisms with first-pass statistics that `choose` may pick for these public facts,
    whatever the noisy count (synth takes only their statistics with the row count)."""
    wide = MARGINALS_FROM_COLUMNS <= columns <= pairs.MAX_COLUMNS
    tree = levels or PRIVTREE_FROM.get(d, PRIVTREE_FROM_DEFAULT) != float("inf")
    return ("marginals",) * wide + ("privtree",) * tree


def run(
    X: Rows | np.ndarray,
    *,
    epsilon: Fraction,
    noisy_rows: int,
    relation: str,
    source: RandomSource,
    ledger: Ledger,
    rng: np.random.Generator,
    rows: int | None,
) -> MechanismRun:
    """Run the mechanism `choose` picks; its description says that auto chose it and why."""
    X = as_rows(X)
    name = choose(X.d, epsilon, noisy_rows, relation, bool(X.lead), X.d - len(X.flagged))
    inner = CANDIDATES[name](
        X,
        epsilon=epsilon,
        noisy_rows=noisy_rows,
        relation=relation,
        source=source,
        ledger=ledger,
        rng=rng,
        rows=rows,
    )
    auto = {
        "chosen": name,
        "rule": rule_text(),
        "from": "d, epsilon, noisy_rows, relation, level columns, columns",
    }
    return MechanismRun(
        output=inner.output,
        description={**inner.description, "selected_by": auto},
        guarantee=inner.guarantee,
        w1_bound=inner.w1_bound,
    )
