"""online-replay --mechanism marginals (issue 25): the continual marginals mechanism
(`online.marginals`). Its ledger adds up to eps exactly; the node schedule counts every segment
once in every release; neighbouring files through the real CLI (the adversarial mixed rows)
give identical outputs once the counted values are forced equal; an audit of the released
counts of neighbouring streams on the Binary Mechanism's schedule, with a mutant that forgets
the nodes-per-row factor of the noise scale (caught); releases well-formed, constraints held."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.online import marginals as om
from dpsynth_cli.online import schedule as osch
from dpsynth_cli.online.cube import StreamCube
from dpsynth_cli.online.replay import REPORT_NAME
from dpsynth_cli.online.state import STATE_FILE
from dpsynth_cli.privacy.noise import RandomSource
from tests.audit import audit
from tests.test_neighbours_mixed import ROWS as MIXED_ROWS
from tests.test_online_cli import listing, one_line_error, run
from tests.test_online_engine import src
from tests.test_online_mixed import COMMON, SCHEMA, mixed_lines, write

MARGINALS = ["--mechanism", "marginals"]
CHECKPOINTS = ["--checkpoints", "every:30d"]


# -- the node schedule and the ledger --------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 13, 40])
@pytest.mark.parametrize("top", [0, 1, 2, 3])
def test_every_release_counts_every_segment_once(k, top):
    """Release j sums nodes covering segments 1..j exactly once each; a segment is in at most
    `per_row` of the used nodes (the noise scale's factor), and the nodes a release sums are
    complete by then (their last segment has ended)."""
    sched = osch.Schedule(k, top)
    for j in range(1, k + 1):
        covered = np.zeros(k + 2, dtype=int)
        for level, a in sched.sums(j):
            covered[(a << level) + 1 : ((a + 1) << level) + 1] += 1
            assert osch.Schedule.end((level, a)) <= j
        assert (covered[1 : j + 1] == 1).all() and not covered[j + 1 :].any()
    summed = {n for j in range(1, k + 1) for n in sched.sums(j)}
    every = {(lv, a) for lv in range(top + 1) for a in range(k + 1)}
    assert {n for n in every if sched.used(n)} == summed
    assert max(len(sched.nodes_of(i)) for i in range(1, k + 1)) == sched.per_row
    assert sched.per_row <= top + 1


def test_schedule_rule():
    """Few checkpoints: the segments one by one (m = 1); many: the Binary Mechanism's tree."""
    assert osch.schedule(4).top == 0 and osch.schedule(4).per_row == 1
    big = osch.schedule(4096)
    assert big.top > 0 and big.worst() < 4096


def test_epoch_schedule_counts_every_segment_once():
    """The unbounded schedule (issue 39): release k sums nodes covering segments 1..k exactly
    once each, all complete by k; a segment is in at most m_j nodes of its epoch; nothing
    depends on how many checkpoints come later."""
    E = osch.EpochSchedule
    for k in range(1, 300):
        covered = np.zeros(k + 2, dtype=int)
        for node in E.sums(k):
            j, lv, a = node
            first = (1 << j) + (a << lv)
            covered[first : E.end(node) + 1] += 1
            assert E.end(node) <= k
        assert (covered[1 : k + 1] == 1).all() and not covered[k + 1 :].any()
    for i in range(1, 300):
        assert len(E.nodes_of(i)) <= E.per_row(osch.epoch_of(i)[0])
    assert osch.epoch_schedule(13).per_row == 14  # beyond EPOCH_SEARCH: the binary tree
    assert osch.stream_factor(48) == pytest.approx(48**0.5)


@pytest.mark.parametrize("eps", [1, 0.3, 2.5])
@pytest.mark.parametrize("relation", ["replace", "add-remove"])
@pytest.mark.parametrize("rows", [10, 3000, 10**6])
def test_ledger_sums_to_eps_exactly(eps, relation, rows):
    """eps_1 + eps_S + eps_2 = eps exactly; the scales carry every factor: the prefix node
    sens R / eps_2, a later node sens R m / (eps_2 + eps_S), one-way sens D m / eps_1."""
    eng = engine(Fraction(eps), relation)
    eng.begin(rows)
    eng.feed(CUBE.to_cube(np.random.default_rng(0).random((20, 3))), [10, 20])
    ledger = eng.ledger()
    assert ledger.pure_spent == Fraction(eps)
    mp = eng.plan
    sens = 2 if relation == "replace" else 1
    d, r = len(mp.attributes), mp.measurements
    assert mp.one_way + mp.select + mp.pairs == Fraction(eps)
    for m in (1, 3):
        assert mp.one_scale(m) >= Fraction(sens * d * m) / mp.one_way
        assert mp.node_pair_scale(m) >= Fraction(sens * r * m) / (mp.pairs + mp.select)
    assert mp.prefix_scale() >= Fraction(sens * r) / mp.pairs
    assert mp.rounds == r and mp.round_epsilon == mp.select / r


def engine(eps: Fraction, relation: str, cube: StreamCube | None = None) -> om.MarginalsEngine:
    eng = om.MarginalsEngine(cube or CUBE, eps, relation)
    eng.use(src(f"eng-{eps}-{relation}"))
    return eng


CUBE = StreamCube(
    (
        ColumnSpec("ward", "category", 0.0, 3.0, levels=("A", "B", "C", "D")),
        ColumnSpec("x", "float", 0.0, 1.0),
        ColumnSpec("n", "integer", 0.0, 9.0),
    )
)


def resumed(eng: om.MarginalsEngine) -> om.MarginalsEngine:
    """The engine saved and loaded as --state does (its arrays and metadata only)."""
    meta = json.loads(json.dumps(eng.state_meta()))
    files = {k: np.array(v) for k, v in eng.arrays().items()}
    out = om.MarginalsEngine.from_state(eng.cube, eng.epsilon, eng.relation, meta, files)
    out._rows = 0
    return out


def test_a_continued_stream_draws_what_one_run_draws():
    """The same seed, one run against the state saved and loaded after every checkpoint: the
    same noisy nodes, the same chosen pairs, the same sums at every checkpoint (the schedule,
    the plan and the selection do not depend on where runs end, nor on the first run's size:
    a --state stream is planned for at least HORIZON x its selection's rows)."""
    X = CUBE.to_cube(np.random.default_rng(3).random((3000, 3)))
    stops = [1 << k for k in range(12)]
    one = engine(Fraction(1), "add-remove")
    one.begin(2048, True)
    one.feed(X, stops)
    many = engine(Fraction(1), "add-remove")
    for lo, hi in zip([0, 5, 300, 1500], [5, 300, 1500, 3000], strict=True):
        many.begin(max(s for s in stops if s <= hi), True)  # each run's planning size
        many.feed(X[lo:hi], stops)
        many = resumed(many)
        many.use(src("eng-1-add-remove"))  # each run: a new source (here: the same seed)
    assert many.closed == one.closed == 12 and many.select_segment == one.select_segment > 0
    assert many.plan == one.plan and one.plan.rows >= om.HORIZON * om.select_rows(one.plan)
    assert many.tree == one.tree and many.seconds == one.seconds
    for k in range(1, 13):
        a, b = one._summed_one_way(k)[0], many._summed_one_way(k)[0]
        assert all((x == y).all() for x, y in zip(a, b, strict=True))
    a, b = one._summed_two_way(12)[0], many._summed_two_way(12)[0]
    assert a.keys() == b.keys() and all((a[e] == b[e]).all() for e in a)


@pytest.mark.parametrize("relation", ["replace", "add-remove"])
@pytest.mark.parametrize("rows", [1, 600, 4096, 10**6])
def test_the_selection_waits_for_its_signal(relation, rows):
    """select_at: the rows where each round's eps_S / R x rows / sens reaches SELECT_SIGNAL, or
    a quarter of the planning size if fewer (a stream ending with its run); with --state the
    plan is for at least HORIZON x that many rows, so the cap never binds, and replanning from
    the stored size (`from_state`) gives the same plan."""
    mp = om.stream_plan(Fraction(1), rows, CUBE, relation)
    need = om.select_rows(mp)
    assert need == math.ceil(om.SELECT_SIGNAL * mp.sensitivity * mp.rounds / float(mp.select))
    assert mp.select_at == min(need, max(rows // 4, 1)) and mp.rows == rows
    kept = om.stream_plan(Fraction(1), rows, CUBE, relation, continued=True)
    assert kept.rows == max(rows, om.HORIZON * om.select_rows(kept))
    assert kept.select_at == om.select_rows(kept)
    assert om.stream_plan(Fraction(1), kept.rows, CUBE, relation) == kept
    if rows >= om.HORIZON * need:
        assert kept == mp


# -- audit on neighbouring streams -----------------------------------------------------------------
AUDIT_CUBE = StreamCube((ColumnSpec("b", "boolean", 0.0, 1.0, levels=("false", "true")),))


class _OneStream(RandomSource):
    """A seeded source whose children are itself: i.i.d. runs draw one after another from one
    stream (fast: no refill per spawned child)."""

    def spawn(self, name: str) -> RandomSource:
        return self


class _Recounting(om.MarginalsEngine):
    """The mutant: a segment's rows are not cleared at its checkpoint, so the next node counts
    them again (each row counted once in each node is what the schedule's eps rests on)."""

    def checkpoint(self, t: int) -> None:
        seg = self._segment
        super().checkpoint(t)
        self._segment = seg


def released_after(X: np.ndarray, runs: int, label: str, mutant: bool) -> np.ndarray:
    """The second checkpoint's released count of `false` less its count in the base stream,
    the stream continued from a saved state between the checkpoints (one column: eps_1 = eps,
    scale 1 on each node; the sum at 2 is node 1 + node 2, each row in one of them)."""
    out = np.empty(runs)
    source = _OneStream(_seed=int.from_bytes(label.encode()[:8], "little"))
    kind = _Recounting if mutant else om.MarginalsEngine
    for r in range(runs):
        eng = kind(AUDIT_CUBE, Fraction(1), "add-remove")
        eng.use(source)
        eng.begin(20)
        eng.feed(X[:10], [10])
        meta, files = eng.state_meta(), eng.arrays()
        eng2 = kind.from_state(AUDIT_CUBE, Fraction(1), "add-remove", meta, files)
        eng2.use(source)
        eng2.feed(X[10:], [20])
        out[r] = eng2._summed_one_way(2)[0][0][0] - 20
    return out


def test_audit_of_the_released_counts_and_a_mutant():
    """Add-remove, across a --state save and load: one row of segment 1 (level `false`)
    present or its slot empty. It is in one node (epoch 0): the sum at checkpoint 2 moves by 1
    at scale 1 (eps). The mutant counts segment 1 again in node 2: it moves by 2 (tail ratio up
    to e^2), which the audit must see."""
    X = AUDIT_CUBE.to_cube(np.zeros((20, 1)))
    X2 = X.copy()
    X2[3] = np.nan  # an empty time slot
    results = {}
    for mutant, runs in ((False, 1600), (True, 3000)):
        a = released_after(X, runs, f"ma{mutant}", mutant)
        b = released_after(X2, runs, f"mb{mutant}", mutant)
        results[mutant] = audit(a, b)
    print(
        f"\n[online marginals] audit {results[False].summary()}; mutant {results[True].summary()}"
    )
    results[False].assert_within(1.0)
    results[True].assert_exceeds(1.0)


# -- through the CLI -------------------------------------------------------------------------------
def forced_feed(monkeypatch) -> None:
    """The counted values forced equal on both sides: what is left to differ is what a value
    decides outside the ledger (as tests/test_online_mixed.py does for the partition engine)."""
    feed = om.MarginalsEngine.feed
    monkeypatch.setattr(
        om.MarginalsEngine,
        "feed",
        lambda self, X, *a, **k: feed(self, np.full_like(X, 0.3), *a, **k),
    )


def neighbours(runner, tmp_path, monkeypatch, schema: dict, row: str | None) -> list[tuple]:
    seen = []
    for side in ("base", "neighbour"):
        work = tmp_path / side
        lines = mixed_lines(1000)
        if side == "neighbour" and row is not None:
            lines[301] = lines[301][:10] + "," + MIXED_ROWS[row]
        write(work, lines, schema=schema)
        monkeypatch.chdir(work)
        result = run(runner, "s.csv", *COMMON, *CHECKPOINTS, *MARGINALS, "--out-dir", "rel")
        seen.append((result.exit_code, result.output, listing(work / "rel")))
    return seen


@pytest.mark.parametrize("row", [*MIXED_ROWS, "not forced"])
def test_mixed_csv_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    """The row at time 302 of 1000 replaced by an adversarial one (its time kept): releases, file
    names, report, messages and exit code identical once the counted values are forced equal;
    "not forced" shows the comparison can fail."""
    if row != "not forced":
        forced_feed(monkeypatch)
    other = "all missing" if row == "not forced" else row
    seen = neighbours(runner, tmp_path, monkeypatch, SCHEMA, other)
    assert seen[0][0] == 0 and len(seen[0][2]) == 4, seen[0][1]
    if row == "not forced":
        name = sorted(seen[0][2])[-1]
        assert name.startswith("release-") and seen[0][2][name] != seen[1][2][name]
    else:
        assert seen[0] == seen[1]


CONSTRAINED = {**SCHEMA, "constraints": ["day >= floor(at)", "n <= 5"]}


def test_releases_are_well_formed_and_obey_the_constraints(runner, tmp_path, monkeypatch):
    """Every checkpoint's release: exactly t rows, the declared columns and types, levels among
    the declared ones (or `other`), the constraints held; the report's ledger adds to eps."""
    write(tmp_path, mixed_lines(1000), schema=CONSTRAINED)
    monkeypatch.chdir(tmp_path)
    result = run(
        runner, "s.csv", *COMMON, "--checkpoints", "monthly", *MARGINALS, "--out-dir", "rel"
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "rel" / REPORT_NAME).read_text())
    assert [c["rows"] for c in report["checkpoints"]] == [310, 590, 900]
    assert report["ledger"]["total_epsilon_exact"] == "1"
    assert {e["step"] for e in report["ledger"]["entries"]} == {
        "online-marginals:one-way",
        "online-marginals:select",
        "online-marginals:two-way",
    }
    assert report["mechanism"]["node_schedule"]["checkpoints_so_far"] == 3
    assert report["mechanism"]["selection"]["made"]
    assert "no a-priori W1 bound" in report["accuracy_note"]
    assert "vacuous" not in result.output
    for c in report["checkpoints"]:
        assert "w1_bound_mixed_metric" not in c
        out = pq.read_table(tmp_path / "rel" / c["file"])
        assert out.num_rows == c["rows"] and out.schema.names == list(SCHEMA["columns"])
        assert set(out.column("sex").to_pylist()) <= {"F", "M"}
        assert set(out.column("ward").to_pylist()) <= {"A", "B", "other"}
        assert out.schema.field("day").type == pa.date32()
        assert pa.types.is_timestamp(out.schema.field("at").type)
        assert out.schema.field("smoker").type == pa.bool_()
        n = out.column("n").to_numpy(zero_copy_only=False)
        assert np.all(np.isnan(n) | (n <= 5))


@pytest.mark.parametrize(
    "flags,says",
    [
        (["--mechanism", "privtree"], "--mechanism must be one of auto, partition, marginals"),
    ],
)
def test_usage_errors(runner, tmp_path, monkeypatch, flags, says):
    write(tmp_path, mixed_lines(50))
    monkeypatch.chdir(tmp_path)
    args = ["s.csv", *COMMON, *CHECKPOINTS, *MARGINALS, *flags, "--out-dir", "rel"]
    result = run(runner, *args)
    one_line_error(result, 2)
    assert says in result.output
    assert not Path("rel").exists() and not Path("st").exists()


def test_auto_rule():
    """auto: marginals where synth's rule picks it (>= 4 columns, eps x rows / (sensitivity x
    columns) >= 90), else partition, with or without --state; a continued state keeps its
    stream's mechanism, and another --mechanism is refused."""
    from dpsynth_cli.errors import PrivacyRefusal
    from dpsynth_cli.online.replay import ReplayOptions, choose_mechanism

    specs = [ColumnSpec(f"c{i}", "float", 0.0, 1.0) for i in range(5)]
    wide = ReplayOptions(1.0, relation="add-remove")
    assert choose_mechanism(wide, specs, None, 450) == "marginals"  # 450 / 5 = 90
    assert choose_mechanism(wide, specs, None, 449) == "partition"
    assert choose_mechanism(wide, specs, "state", 10**6) == "marginals"
    assert choose_mechanism(wide, specs, "state", 10**6, "partition") == "partition"
    assert choose_mechanism(wide, specs, "state", 3, "marginals") == "marginals"
    with pytest.raises(PrivacyRefusal, match="holds a --mechanism marginals stream"):
        choose_mechanism(replace(wide, mechanism="partition"), specs, "st", 9, "marginals")
    assert choose_mechanism(ReplayOptions(1.0), specs, None, 450) == "partition"  # replace: 45
    assert choose_mechanism(wide, specs[:3], None, 10**6) == "partition"  # 3 columns
    fixed = ReplayOptions(1.0, relation="add-remove", mechanism="partition")
    assert choose_mechanism(fixed, specs, None, 10**6) == "partition"


def test_auto_picks_marginals_on_a_mixed_stream(runner, tmp_path, monkeypatch):
    write(tmp_path, mixed_lines(1000))
    monkeypatch.chdir(tmp_path)
    args = ["s.csv", *COMMON, *CHECKPOINTS, "--neighboring", "add-remove", "--out-dir", "rel"]
    assert run(runner, *args).exit_code == 0
    report = json.loads((tmp_path / "rel" / REPORT_NAME).read_text())
    assert report["mechanism"]["name"].startswith("online marginals")
    assert report["mechanism"]["chosen"]["requested"] == "auto"
    assert run(runner, *args[:-2], "--out-dir", "rel2", "--state", "st").exit_code == 0
    report = json.loads((tmp_path / "rel2" / REPORT_NAME).read_text())
    assert report["mechanism"]["name"].startswith("online marginals")


# -- the plan reads public facts only (privacy review, finding 2) ----------------------------------
def tail(rows: int) -> list[str]:
    """`rows` rows after the last checkpoint: all on the stream's last day (2021-04-10), so they
    reach no checkpoint by row count (`1000`) or by time (`monthly`: the next is May 1)."""
    return ["2021-04-10" + line[10:] for line in mixed_lines(rows, seed=1)]


@pytest.mark.parametrize(
    "mechanism,checkpoints,last", [("marginals", "1000", 1000), ("auto", "monthly", 900)]
)
def test_the_rows_after_the_last_checkpoint_change_nothing(tmp_path, mechanism, checkpoints, last):
    """The reviewer's reproduction through `python -m dpsynth_cli`: two streams with the same
    1,000 rows and 30 vs 3,030 rows after the last checkpoint, the same --seed. Their number is
    not released (no --row-counts-public), so the mechanism (auto, replace: 1,000 rows plan
    partition, 4,030 would plan marginals), the grids, bins and one-way share are planned from
    the last checkpoint's rows: every release and the report byte-identical, and so are the
    messages and exit code."""
    cmd = [sys.executable, "-m", "dpsynth_cli", "online-replay", "s.csv", *map(str, COMMON)]
    cmd += ["--checkpoints", checkpoints, "--mechanism", mechanism, "--out-dir", "rel"]
    procs = []
    for extra in (30, 3030):
        write(tmp_path / str(extra), mixed_lines(1000) + tail(extra))
        procs.append(
            subprocess.Popen(
                cmd, cwd=tmp_path / str(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
    seen = []
    for extra, proc in zip((30, 3030), procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        seen.append((out, err, listing(tmp_path / str(extra) / "rel")))
    assert seen[0] == seen[1]
    report = json.loads(seen[0][2][REPORT_NAME])
    assert report["checkpoints"][-1]["rows"] == last
    assert report["mechanism"]["chosen"]["planning_rows"] == last
    name = report["mechanism"]["name"]
    assert name.startswith("online marginals" if mechanism == "marginals" else "online synth")


@pytest.mark.parametrize(
    "flags,planned",
    [
        (["--checkpoints", "1000"], 1000),
        (["--checkpoints", "every:300"], 900),
        (["--checkpoints", "monthly"], 900),  # the rows before 2021-04-01 (public timeline)
        (["--checkpoints", "5000"], 0),  # no checkpoint reached: nothing released
        (["--checkpoints", "1000", "--row-counts-public"], 1030),  # declared public
    ],
)
def test_the_plan_takes_the_planning_size_not_the_row_count(
    runner, tmp_path, monkeypatch, flags, planned
):
    """1,030 rows: choose_mechanism and the marginals plan (grids, one-way share, bins) get the
    last checkpoint's row count, or with --row-counts-public the count at the end; the report
    says which, and never the count at the end otherwise."""
    replay_mod = sys.modules["dpsynth_cli.online.replay"]
    asked: dict[str, int] = {}
    choose, plan = replay_mod.choose_mechanism, om.stream_plan

    def spy_choose(options, specs, state_dir, rows, stored=None):
        asked["choose"] = rows
        return choose(options, specs, state_dir, rows, stored)

    def spy_plan(epsilon, rows, *args):
        asked["plan"] = rows
        return plan(epsilon, rows, *args)

    monkeypatch.setattr(replay_mod, "choose_mechanism", spy_choose)
    monkeypatch.setattr(om, "stream_plan", spy_plan)
    write(tmp_path, mixed_lines(1030))
    monkeypatch.chdir(tmp_path)
    result = run(runner, "s.csv", *COMMON, *flags, *MARGINALS, "--out-dir", "rel")
    assert result.exit_code == 0, result.output
    assert asked == {"choose": planned, "plan": planned}
    text = (tmp_path / "rel" / REPORT_NAME).read_text()
    assert json.loads(text)["mechanism"]["chosen"]["planning_rows"] == planned
    assert ("1030" in text) is (planned == 1030)


def test_the_checkpoints_notice_rule():
    """Issue 38, item 5: the last release's noise in units of one release's at the same eps,
    from the number of checkpoints only: marginals sums K segments (m = 1) below a few hundred
    checkpoints, so sqrt(K), and the binary tree's m sqrt(nodes) beyond; partition's counters
    do not depend on the checkpoints (1). The notice comes above 3x: from 10 checkpoints on."""
    from dpsynth_cli.online.replay import checkpoints_factor, checkpoints_notice

    assert checkpoints_factor("marginals", 1) == 1.0
    assert checkpoints_factor("marginals", 4) == pytest.approx(2.0)
    assert checkpoints_factor("marginals", 48) == pytest.approx(48**0.5)
    assert checkpoints_factor("marginals", 4096) == pytest.approx(osch.stream_factor(4096))
    assert osch.stream_factor(4096) < 4096**0.5
    assert all(checkpoints_factor("partition", k) == 1.0 for k in (1, 48, 4096))
    assert checkpoints_notice("marginals", 9, 1.0) == []
    (notice,) = checkpoints_notice("marginals", 10, 1.0)
    assert notice.startswith("10 checkpoints at eps 1: the last release's counts carry about 3x")
    assert checkpoints_notice("partition", 4096, 1.0) == []


# -- issue 39: neighbours through the real command across two --state runs -------------------------
@pytest.mark.parametrize("row", ["number in a category", "all missing", "not forced"])
def test_neighbours_across_two_state_runs(runner, tmp_path, monkeypatch, row):
    """Two streams whose row at time 302 differs (an adversarial row), each replayed as a cron
    job: a first run on 650 rows and a second on all 1,000 continuing its --state (auto picks
    marginals). With the counted values forced equal, both runs' releases, reports (ledger,
    selection checkpoint, chosen pairs, planning sizes, epsilon_this_run 1 then 0), messages
    and exit codes are identical, and so are the secret states' metadata: nothing a value
    decides leaves outside the ledger. "not forced" shows the comparison can fail. The
    selection threshold is lowered (a public constant) so that the second run makes it."""
    monkeypatch.setattr(om, "SELECT_SIGNAL", 8.5)  # about 700 rows: checkpoint 3
    if row != "not forced":
        forced_feed(monkeypatch)
    seen = []
    for side in ("base", "neighbour"):
        work = tmp_path / side
        lines = mixed_lines(1000)
        if side == "neighbour":
            other = "all missing" if row == "not forced" else row
            lines[301] = lines[301][:10] + "," + MIXED_ROWS[other]
        runs = []
        for part in (650, 1000):
            write(work, lines[:part])
            monkeypatch.chdir(work)
            flags = [*COMMON, *CHECKPOINTS, "--neighboring", "add-remove", "--state", "st"]
            result = run(runner, "s.csv", *flags, "--out-dir", "rel")
            report = json.loads((work / "rel" / REPORT_NAME).read_text())
            runs.append((result.exit_code, result.output, report))
        with np.load(work / "st" / STATE_FILE) as z:  # the raw rows' digest aside
            state = json.loads(bytes(z["meta"]).decode("utf-8"))
        state.pop("prefix_sha256")
        seen.append((runs, listing(work / "rel"), state))
    (first, last), files, _ = seen[0]
    assert first[0] == last[0] == 0, first[1] + last[1]
    assert [r["stream"]["epsilon_this_run"] for r in (first[2], last[2])] == [1.0, 0.0]
    for report in (first[2], last[2]):
        assert report["ledger"]["total_epsilon_exact"] == "1"
        assert report["mechanism"]["name"].startswith("online marginals")
    selection = last[2]["mechanism"]["selection"]
    assert selection["made"] and selection["at_checkpoint"] == 3, selection  # run 2
    assert sorted(n for n in files if n.startswith("release-")) == [
        n for c in last[2]["checkpoints"] for n in [c["file"]]
    ]
    if row == "not forced":
        name = last[2]["checkpoints"][-1]["file"]
        assert seen[0][1][name] != seen[1][1][name]
    else:
        assert seen[0] == seen[1]
