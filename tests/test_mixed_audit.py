"""Privacy audit of the mixed partition (issue 15), with a mutant the audit must reject.

The real path of a category column: text cells -> `domain.value_matrix` (declared levels ->
codes) -> `Domain.to_unit` (level i -> the centre of slot i of 4 equal slots) -> PMM's noisy counts
(Theorem 3.8) on the binary partition of [0,1], whose level-2 cells are exactly the 4 level slots
here (with one column, the levels-first partition of synth is this same partition: 2 lead bits).
Add/remove one row of the table is add/remove one point of the cube, so the counts along the
added row's path leak at most eps (tests/audit.py; statistics as in tests/test_privacy_audits.py).

Mutant: "merge rare levels into `other`" decided from the data's own counts (a level seen fewer
than 2 times is coded as `other`), the shortcut issue 15 forbids. Adding one row of a rare level
then moves two rows at once (the rare level's cell gains 2, `other`'s loses 1): sensitivity 2 on
the leaf path, which the audit must catch.

Measured (eps = 3, 6000 runs per side, about 6 s each): lower bounds correct 2.72 (estimate
3.02), mutant 3.49 (estimate 3.94).
"""

from __future__ import annotations

import json
import time
from fractions import Fraction
from functools import cache

import numpy as np
import pyarrow as pa
import pytest

from dpsynth_cli import domain as domain_module
from dpsynth_cli.domain import Domain, load_schema, resolve_columns
from dpsynth_cli.mechanisms import pmm
from dpsynth_cli.privacy.ledger import Ledger
from tests.audit import audit
from tests.test_privacy_audits import PmmStats, report, stream

EPS = Fraction(3)
LEVELS = ["A", "B", "R", "other"]
TABLE = ["A", "A", "R"]  # X; X' adds one more "R"
ADDED = "R"
RUNS = 6000


def specs(tmp_path_factory) -> list:
    path = tmp_path_factory.mktemp("schema") / "schema.json"
    column = {"type": "category", "levels": LEVELS, "other": "other"}
    path.write_text(json.dumps({"columns": {"ward": column}}))
    declared = load_schema(str(path))
    return resolve_columns(
        pa.schema([("ward", pa.string())]), ["ward"], declared, {}, typed=False
    ).specs


def merge_rare_levels(mp: pytest.MonkeyPatch) -> None:
    """Mutant: levels seen fewer than twice in the table are coded as the `other` level."""
    real = domain_module.value_matrix

    def merged(table, specs):
        codes = real(table, specs)
        for j, s in enumerate(specs):
            if s.kind == "category" and s.other is not None:
                seen, counts = np.unique(codes[:, j], return_counts=True)
                rare = np.isin(codes[:, j], seen[counts < 2])
                codes[rare, j] = s.levels.index(s.other)
        return codes

    mp.setattr(domain_module, "value_matrix", merged)


VARIANTS = {"correct": None, "rare levels merged from the data": merge_rare_levels}


@cache
def samples(variant: str, column_specs: tuple) -> tuple:
    """RUNS noisy-count statistics per side, through the real coding of the table's text."""
    start = time.perf_counter()
    domain = Domain(column_specs)
    specs_list = list(column_specs)

    def cube(cells: list[str]) -> np.ndarray:
        table = pa.table({"ward": pa.array(cells, pa.string())})
        return domain.to_unit(domain_module.value_matrix(table, specs_list))

    plan = pmm.plan(2, EPS, 1, "add-remove")
    assert plan.depth == 2  # level-2 cells are the 4 level bins
    x = cube(TABLE)  # the correct coding of X and of the added row: the statistics' baseline
    stats = PmmStats(plan, x, cube([ADDED])[0])
    out = []
    with pytest.MonkeyPatch.context() as mp:
        if VARIANTS[variant] is not None:
            VARIANTS[variant](mp)
        for side, cells in (("X", TABLE), ("X'", [*TABLE, ADDED])):
            data = cube(cells)
            src = stream(f"mixed/{variant}/{side}")
            runs = [
                stats.counts(pmm.noisy_level_counts(data, plan, src, Ledger(EPS, "add-remove")))
                for _ in range(RUNS)
            ]
            out.append(np.array(runs))
    return out[0], out[1], time.perf_counter() - start


@pytest.fixture(scope="module")
def column_specs(tmp_path_factory) -> tuple:
    return tuple(specs(tmp_path_factory))


@pytest.mark.heavy
@pytest.mark.parametrize("variant", VARIANTS)
def test_mixed_partition_audit(column_specs, variant):
    """The correct coding passes (with power: above 0.7 eps); the mutant must be caught."""
    a, b, seconds = samples(variant, column_specs)
    result = audit(a, b, names=PmmStats.count_names)
    report(f"mixed partition (category, PMM) eps=3 {variant}", result, seconds)
    if VARIANTS[variant] is None:
        result.assert_within(EPS)
        assert result.epsilon_lower > 0.7 * EPS
    else:
        result.assert_exceeds(EPS)
