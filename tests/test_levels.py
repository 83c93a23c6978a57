"""Issue 36, part 2: many-level categories keep their structure (mechanisms/pairs' fine grids,
attributes.keep_levels, tree_model.level_bins' keep, the schema's "determines", evaluate's
determined_pairs)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpsynth_cli.cli import app
from dpsynth_cli.engine.rows import as_rows
from dpsynth_cli.mechanisms import one_way as one_way_release
from dpsynth_cli.mechanisms import pairs, tree_model
from dpsynth_cli.mechanisms.attributes import PAIR_CELLS, attributes
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger


def test_level_bins_keep_levels_with_large_released_counts():
    mass = np.array([50.0, 1.0, 40.0, 2.0, 30.0, 20.0, 3.0])
    assert tree_model.level_bins(mass, 3).tolist() == [0, 2, 1, 2, 2, 2, 2]  # unchanged rule
    fine = tree_model.level_bins(mass, 3, keep=20.0)
    assert fine.tolist() == [0, 4, 1, 4, 2, 3, 4]  # 30 and 20 keep theirs, 1, 2, 3 pool
    coarse = tree_model.level_bins(mass, 3)
    for b in np.unique(fine):  # the fine bins refine the coarse ones
        assert np.unique(coarse[fine == b]).size == 1
    assert tree_model.level_bins(mass, 3, keep=-np.inf).tolist() == list(range(7))


def test_a_level_column_keeps_every_level_on_its_pair_grid():
    attrs = attributes(3, (7,), (88, 0, 0), ())
    assert attrs[0].pair_cells == 88 and attrs[0].coarse == 88  # no index merging
    assert attrs[1].pair_cells == PAIR_CELLS
    wide = attributes(2, (11,), (2000, 0), ())  # beyond LEVEL_PAIR_CELLS: index runs
    assert wide[0].pair_cells == PAIR_CELLS


def area_rows(n: int, seed: int = 0, determines=()):
    """Cube rows: an 88-level area, the 10-level district it lies in (0.1% of rows another),
    a float depending on the district, and an independent 3-level kind."""
    rng = np.random.default_rng(seed)
    law = rng.integers(0, 10, 88)
    w = rng.gamma(2.0, 1.0, 88)
    area = rng.choice(88, n, p=w / w.sum())
    district = np.where(rng.random(n) < 0.001, rng.integers(0, 10, n), law[area])
    kind = rng.integers(0, 3, n)
    x = np.clip(0.3 + 0.04 * district + rng.normal(0, 0.05, n), 0, 1)

    def unit(level, size, slots):
        return (-(-level * slots // size) + 0.5) / slots

    X = np.column_stack([unit(area, 88, 128), unit(district, 10, 16), unit(kind, 3, 4), x])
    rows = replace(as_rows(X), lead=(7, 4, 2), codes=(88, 10, 3, 0), determines=determines)
    return rows, law, area


def run(rows, epsilon=Fraction(1), n=20000, seed=1):
    ledger = Ledger(epsilon, "add-remove")
    result = pairs.run(
        rows,
        epsilon=epsilon,
        noisy_rows=n,
        relation="add-remove",
        source=noise.RandomSource.seeded(seed),
        ledger=ledger,
        rng=np.random.default_rng(seed),
        rows=None,
    )
    return result, ledger


def agreement(result, law):
    Y = result.points
    area = np.floor(Y[:, 0] * 128).astype(int) * 88 // 128
    district = np.floor(Y[:, 1] * 16).astype(int) * 10 // 16
    return float(np.mean(law[area] == district)), area, district


@pytest.mark.parametrize("declared", [False, True])
def test_spends_sum_to_epsilon_with_fine_and_declared_edges(declared):
    rows, law, _ = area_rows(20000, determines=((0, 1),) if declared else ())
    result, ledger = run(rows, Fraction(7, 10))
    assert ledger.pure_spent == Fraction(7, 10)
    plan = pairs.plan(Fraction(7, 10), 20000, rows, "add-remove")
    assert plan.forced == (1 if declared else 0)
    select = next(s for s in ledger.spends if s.step == "marginals-select")
    assert select.noise["rounds"] == plan.measurements - plan.forced


def test_every_edge_declared_moves_the_selection_share_to_the_pairs():
    rows, _, _ = area_rows(3000, determines=((0, 1),))
    two = replace(rows, source=type(rows.source)(rows.source.X[:, :2]), d=2, lead=(7, 4))
    two = replace(two, codes=(88, 10))
    result, ledger = run(two, Fraction(1), 3000)
    assert [s.step for s in ledger.spends] == ["marginals-one-way", "marginals-two-way"]
    assert ledger.pure_spent == Fraction(1)


def test_a_near_deterministic_pair_is_kept_without_a_declaration():
    rows, law, _ = area_rows(20000)
    result, _ = run(rows)
    assert result.description["fine_edges"]  # chosen privately on its fine table
    share, _, _ = agreement(result, law)
    assert share >= 0.9


def test_a_declared_pair_obeys_its_learned_map_exactly():
    rows, law, _ = area_rows(20000, determines=((0, 1),))
    result, _ = run(rows)
    share, area, district = agreement(result, law)
    assert result.description["learned_maps"] == [[0, 1]]
    assert share >= 0.95
    for a in np.unique(area):  # a function: one district per area
        assert np.unique(district[area == a]).size == 1


def test_the_fine_decision_reads_only_released_values(monkeypatch):
    """Neighbouring tables (one row added) with every release forced equal (noise draws of 0
    on one-way and two-way counts; permute-and-flip spied) give the same fine grids and the
    same candidate list: the grids and candidates depend on released values only, the
    private counts enter only through the scores."""
    rows, _, _ = area_rows(20000)
    X = rows.source.X
    neighbour = replace(rows, source=type(rows.source)(np.vstack([X, X[:1]])))
    monkeypatch.setattr(noise, "discrete_laplace", lambda source, scale, size: np.zeros(size))
    monkeypatch.setattr(
        noise, "discrete_laplace_mixed", lambda source, scales, sizes: np.zeros(sum(sizes))
    )
    seen = []

    def spy(source, scores, epsilon, sensitivity):
        seen.append(len(scores))
        return int(np.argmax(scores))

    monkeypatch.setattr(noise, "permute_and_flip", spy)
    grids = []
    real_of = pairs.FineGrid.of

    def record(mp, one_way, coarse_bin, declared):
        grid = real_of(mp, one_way, coarse_bin, declared)
        grids.append(grid)
        return grid

    monkeypatch.setattr(pairs.FineGrid, "of", staticmethod(record))
    released: list[np.ndarray] = []
    per_run: list[int] = []
    real_consistent = one_way_release.Release.consistent

    def fixed(self, kappa, rng):  # the released one-way counts forced equal on both sides
        released.append(real_consistent(self, kappa, rng))
        i = len(released) - 1
        return released[i % per_run[0] if per_run else i].copy()

    monkeypatch.setattr(one_way_release.Release, "consistent", fixed)
    run(rows)
    per_run.append(len(released))
    first = len(seen)
    run(neighbour)
    assert seen[:first] == seen[first:]
    a, b = grids
    assert all(np.array_equal(x, y) for x, y in zip(a.bins, b.bins, strict=True))
    assert a.k == b.k and a.pairs(a.k) == b.pairs(b.k)


def write_table(tmp_path, seed=3):
    rng = np.random.default_rng(seed)
    n = 20000
    law = rng.integers(0, 10, 88)
    w = rng.gamma(2.0, 1.0, 88)
    area = rng.choice(88, n, p=w / w.sum())
    district = np.where(rng.random(n) < 0.001, rng.integers(0, 10, n), law[area])
    frame = pd.DataFrame(
        {
            "area": [f"A{a:02d}" for a in area],
            "district": [f"D{d}" for d in district],
            "age": rng.integers(18, 90, n),
            "income": np.round(rng.lognormal(10 + 0.05 * district, 0.4), 2).clip(0, 400000),
            "kind": rng.choice(["x", "y", "z"], n),
        }
    )
    path = tmp_path / "areas.csv"
    frame.to_csv(path, index=False)
    schema = {
        "columns": {
            "area": {"type": "category", "levels": [f"A{a:02d}" for a in range(88)]},
            "district": {"type": "category", "levels": [f"D{d}" for d in range(10)]},
            "age": {"type": "integer", "lower": 18, "upper": 90},
            "income": {"type": "float", "lower": 0, "upper": 400000},
            "kind": {"type": "category", "levels": ["x", "y", "z"]},
        }
    }
    return path, schema, {f"A{a:02d}": f"D{law[a]}" for a in range(88)}


def cli_agreement(runner, tmp_path, schema, name):
    data = tmp_path / "areas.csv"
    schema_path = tmp_path / f"{name}.json"
    schema_path.write_text(json.dumps(schema))
    out = tmp_path / f"{name}.csv"
    args = ["synth", str(data), "--schema", str(schema_path), "--eps", "1", "--seed", "4"]
    result = runner.invoke(app, [*args, "-o", str(out), "--mechanism", "marginals"])
    assert result.exit_code == 0, result.output
    ev = runner.invoke(app, ["evaluate", str(data), str(out), "--schema", str(schema_path)])
    assert ev.exit_code == 0, ev.output
    report = json.loads(
        runner.invoke(
            app, ["evaluate", str(data), str(out), "--schema", str(schema_path), "--json"]
        ).stdout
    )
    found = {tuple(p["columns"]): p for p in report["determined_pairs"]}
    return found[("area", "district")]["synthetic_agreement"], pd.read_csv(out)


def test_cli_keeps_the_area_district_map(runner, tmp_path):
    _, schema, law = write_table(tmp_path)
    plain, _ = cli_agreement(runner, tmp_path, schema, "plain")
    assert plain >= 0.9
    mapped = {**schema, "determines": [{"area -> district": law}]}
    share, frame = cli_agreement(runner, tmp_path, mapped, "mapped")
    assert share == 1.0
    assert (frame["district"] == frame["area"].map(law)).all()
    learned = {**schema, "determines": ["area -> district"]}
    share, frame = cli_agreement(runner, tmp_path, learned, "learned")
    assert share >= plain
    assert frame.groupby("area")["district"].nunique().max() == 1


@pytest.mark.parametrize(
    ("determines", "message"),
    [
        ("area -> district", "must be a list"),
        (["area -> town"], "'town', not a column"),
        (["area -> age"], "not a category or boolean column"),
        (["area -> district", "kind -> district"], "determined twice"),
        (["area -> kind", "kind -> area"], "cycle"),
        ([{"area -> district": {"A00": "D1"}}], "every level of 'area'"),
    ],
)
def test_determines_usage_errors(runner, tmp_path, determines, message):
    path, schema, _ = write_table(tmp_path)
    schema_path = tmp_path / "bad.json"
    schema_path.write_text(json.dumps({**schema, "determines": determines}))
    args = ["synth", str(path), "--schema", str(schema_path), "--eps", "1", "-o", "-"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "'determines'" in result.output and message in result.output
