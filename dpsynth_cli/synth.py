"""The `synth` job as a library call: table in, DP synthetic table and public report out.

Flow: choose columns and public bounds -> first pass: row count and histograms for DP bounds of
undeclared columns -> rescale to [0,1]^d -> noisy count -> mechanism (`auto`: chosen from public
quantities), which reads the rows through its own statistics passes -> synthetic points drawn in
batches, back to original units. Every pass reads record batches, so memory is bounded by a
batch and the statistics, not by the number of rows. Every step that reads the rows spends
budget through the ledger; everything in the report is built from the ledger's released values
and public parameters (see `report.build_report`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from dpsynth_cli.constraints import Constraint, always_derived, choose, describe
from dpsynth_cli.determines import Dependency, level_maps
from dpsynth_cli.domain import COMPLETE, ColumnSpec, Domain, bounds_flag, complete_rows
from dpsynth_cli.engine import threads
from dpsynth_cli.engine.plan import BatchPlan, Place
from dpsynth_cli.engine.rows import BatchesSource, Rows, Spill, SpillSource
from dpsynth_cli.engine.values import TableData, tallied_rows
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.mechanisms import hierarchy, lowdim, pairs, pmm, privtree, psmm, select
from dpsynth_cli.mechanisms.attributes import attributes
from dpsynth_cli.mechanisms.base import Mechanism, MechanismRun
from dpsynth_cli.mechanisms.bounds import (
    NoBoundsFound,
    estimate_bounds,
    estimated_notice,
    histograms,
    no_bounds_message,
)
from dpsynth_cli.mechanisms.conditioned import Rules, conditioned
from dpsynth_cli.mechanisms.count import count_sensitivity, empty_floor, noisy_tally
from dpsynth_cli.privacy.ledger import Ledger, check_epsilon, round_down
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.uniformity import (
    collapse_notices,
    dropped_notices,
    signal_block,
    weak_guarantee_notice,
)

DEFAULT_BOUNDS_SHARE = 0.1
# --rows beyond this is refused before any work: writing is about 10^6 rows/s (measured on a
# loaded 2-core machine, 3 columns: 10^7 rows in 12 s to Parquet, 15 s to CSV; wider rows are
# slower), so 10^11 rows is more than a day of writing and terabytes of output. Memory is not
# the limit: the output is written batch by batch.
MAX_ROWS = 10**11
MAX_ROWS_WHY = "more than a day of writing at the measured 10^6 rows/s, and terabytes"
# The signal check and the diagnostics look at the first batch of this many output rows (all of
# them when the output is smaller): enough for their tests, bounded memory for any output.
SIGNAL_ROWS = 1_000_000
COUNT_SHARE = 0.05
MECHANISMS: dict[str, Mechanism] = {
    "auto": select.run,
    "pmm": pmm.run,
    "privtree": privtree.run,
    "hierarchy": hierarchy.run,
    "psmm": psmm.run,
    "marginals": pairs.run,
}
# Mechanisms whose first statistics synth's first pass takes (every bound declared, full
# dimension), by --mechanism: auto may pick either.
FIRST_PASS: dict[str, tuple[str, ...]] = {
    "auto": ("privtree", "marginals"),
    "privtree": ("privtree",),
    "marginals": ("marginals",),
}
# What `--dry-run` says about how each mechanism fixes its parameters (before any data is read).
PLAN_RULES: dict[str, str] = {
    "auto": "after the noisy count: " + select.rule_text(),
    "pmm": "depth r = ceil(log2(eps_mechanism * noisy_rows / sensitivity)), minus 1 when d = 1, "
    "capped at 24 (Corollary 3.11); per-level discrete Laplace scales by eq. (3.7)",
    "privtree": "start level, split threshold and bias from eps, d and noisy_rows "
    "(privtree.POLICY); structure and leaf counts share the mechanism epsilon",
    "psmm": "a grid of k^d cubic cells, k^d about 0.5 (eps_mechanism * noisy_rows / "
    "sensitivity)^(2/3) for d = 1, half of eps_mechanism * noisy_rows / sensitivity for d = 2, "
    "all of it for d >= 3 (Corollary 3.7), capped (psmm.GRID_RULE, psmm.plan); noisy counts "
    "projected onto the closest probability measure by an exact min-cost flow (corrected "
    "Algorithm 2)",
    "marginals": "one-way histograms (40% of eps_mechanism; 60% when eps_mechanism * noisy_rows "
    "/ (sensitivity * columns) < 400), a spanning tree of column pairs "
    "and a second parent per column chosen by permute-and-flip (10%), their two-way histograms "
    "on bins chosen from the one-way release (50%); rows drawn from the model "
    "(mechanisms/pairs)",
    "hierarchy": "finest grid about c_d (eps * noisy_rows / sensitivity)^(1/(d+1)) cells per "
    "axis, a band of coarser levels above it (hierarchy.RESOLUTION, hierarchy.LEVELS)",
}


@dataclass(frozen=True)
class SynthOptions:
    """What the user asked for (all public)."""

    epsilon: float
    bounds_epsilon: float | None = None
    relation: str = "add-remove"
    mechanism: str = "auto"
    rows: int | None = None
    diagnostics: bool = False
    dim: str = "full"
    determines: tuple[Dependency, ...] = ()  # the schema's declared dependencies (`determines`)


@dataclass(frozen=True)
class BudgetPlan:
    """How the total epsilon is split between steps, fixed before any data is read."""

    total: Fraction
    bounds: dict[str, Fraction]
    count: Fraction
    mechanism: Fraction

    def to_json(self) -> dict[str, Any]:
        return {
            "total_epsilon": float(self.total),
            "bounds_estimate_epsilon": {k: float(v) for k, v in self.bounds.items()},
            "noisy_count_epsilon": float(self.count),
            "mechanism_epsilon": float(self.mechanism),
        }


def dim_plan(dim: str) -> dict[str, Any]:
    """What `--dim` will do, for `--dry-run`'s plan: the public shares and rules of `lowdim`."""
    if dim.strip().lower() == "full":
        return {"dim": "full"}
    return {
        "dim": dim,
        "dim_plan": {
            "epsilon_shares_of_mechanism": {
                "first_moments": float(lowdim.FIRST_MOMENT_SHARE),
                "second_moments": float(lowdim.SECOND_MOMENT_SHARE),
                "inner": "the rest",
            },
            "dim_rule": lowdim.DIM_RULE if dim.strip().lower() == "auto" else "fixed by --dim",
            "inner_mechanism": "--mechanism, on the coordinates in the private subspace",
            "fallback": lowdim.FALLBACK_RULE
            if dim.strip().lower() == "auto"
            else "none (--dim N runs as asked; a non-numeric column is a usage error)",
            "signal_check": "the chosen directions' noisy eigenvalues against the noise's "
            "spectral norm (dpsynth_cli/spectrum.py): report `dim.signal`, a notice when they "
            "cannot be told from noise",
        },
    }


def plan_budget(
    options: SynthOptions, specs: list[ColumnSpec], constraints: Sequence[Constraint] = ()
) -> BudgetPlan:
    """Split --eps: bounds estimates (only for undeclared columns), noisy count, mechanism.

    Every usage error that the flags decide is raised here; with `specs` (the chosen columns,
    from declarations and the input's header) also those the columns decide: --dim, the
    marginals' number of columns, an integer column's bounds, the `constraints`' kinds. The
    commands call it before the spend is recorded (and before the input is opened when the
    declarations alone decide the columns), so that none of these costs budget."""
    total = check_epsilon(options.epsilon)
    if options.mechanism not in MECHANISMS:
        raise UsageError(f"--mechanism must be one of {', '.join(MECHANISMS)}")
    if options.rows is not None and options.rows < 0:
        raise UsageError("--rows must be a non-negative integer")
    if options.rows is not None and options.rows > MAX_ROWS:
        raise UsageError(f"--rows {options.rows}: at most {MAX_ROWS:.0e} ({MAX_ROWS_WHY})")
    if specs:  # refused before data is read
        dim = lowdim.parse_dim(options.dim, len(specs))
        lowdim.check_mixed(dim, specs)
        if options.mechanism == "marginals":
            _check_marginals_width(dim, specs)
        Domain(tuple(s for s in specs if s.has_bounds))  # an integer column's bounds
        choose(constraints, specs)
    undeclared = [s.name for s in specs if not s.has_bounds]
    bounds: dict[str, Fraction] = {}
    if undeclared:
        share = options.bounds_epsilon
        if share is None:
            share = float(total) * DEFAULT_BOUNDS_SHARE
        if share == 0:
            raise UsageError(
                f"column '{undeclared[0]}' has no bounds and --bounds-eps is 0: declare them "
                f"with {bounds_flag(undeclared[0])} or --schema"
            )
        share = check_epsilon(share, "--bounds-eps")
        if share >= total:
            raise UsageError("--bounds-eps must be smaller than --eps")
        bounds = {name: round_down(share / len(undeclared)) for name in undeclared}
    rest = total - sum(bounds.values(), Fraction(0))
    count = round_down(rest * Fraction(COUNT_SHARE))
    return BudgetPlan(total, bounds, count, rest - count)


def _check_marginals_width(dim: int | None, specs: list[ColumnSpec]) -> None:
    """--mechanism marginals takes at most pairs.MAX_COLUMNS columns: all of them with --dim
    full (and with --dim auto on non-numeric columns, which falls back to it before any pass),
    N with --dim N. --dim auto otherwise chooses its dimension from the noisy moments: checked
    then (`pairs.run`)."""
    if dim == 0 or (dim is None and lowdim.non_numeric(specs)):
        pairs.check_columns(len(specs))
    elif dim is not None:
        pairs.check_columns(dim, f"--dim {dim}")


@dataclass(frozen=True)
class BatchTables:
    """Planned batch -> its rows in original units: the release's placement of points in cells
    (released geometry), then the map back through the public `Domain`. It holds released
    values and declarations only, never rows, so it is what Dask workers receive."""

    place: Place
    domain: Domain

    def __call__(self, batch: BatchPlan) -> pa.Table:
        return self.domain.from_unit(batch.points(self.place))


@dataclass
class SynthResult:
    """The release (synthetic points drawn lazily, in batches), the public report pieces, and
    (only if asked) non-private diagnostics."""

    domain: Domain
    budget: BudgetPlan
    ledger: Ledger
    run: MechanismRun
    noisy_rows: int
    signal: dict[str, Any]
    diagnostics: dict[str, Any] | None = None
    notices: list[str] = field(default_factory=list)
    dim: dict[str, Any] | None = None  # the report's `dim` block (--dim auto or N)
    constraints: dict[str, Any] | None = None  # the report's block, when any are declared

    @property
    def output_rows(self) -> int:
        return self.run.output.rows

    def plan(self, batch_rows: int | None = None) -> Iterator[BatchPlan]:
        """The output batches (cells, counts, own generator), at most `batch_rows` rows each."""
        return self.run.output.plan(batch_rows)

    @property
    def tables(self) -> BatchTables:
        """What turns a planned batch into its table: the same code here and on Dask workers."""
        return BatchTables(self.run.output.place, self.domain)

    def batches(self, batch_rows: int | None = None) -> Iterator[pa.Table]:
        """The synthetic table in original units, at most `batch_rows` rows per piece."""
        return threads.ordered_map(self.tables, self.plan(batch_rows))

    @property
    def table(self) -> pa.Table:
        """The whole synthetic table at once (in memory)."""
        return next(self.batches())


@dataclass
class CountAndBounds:
    """The first pass: the number of complete rows, and the bounds-estimate histograms of the
    undeclared columns (exact integers; batches add). With `domain` (every bound declared, so
    the cube is known before any pass), also the statistics of the mechanisms that may run
    (`ahead`: PrivTree's first histogram, the marginals' counts), which spares them a pass."""

    columns: tuple[int, ...]
    domain: Domain | None = None
    mechanisms: tuple[str, ...] = ()
    # Whether to write the rows as the later passes read them (the cube with `domain`, else the
    # value rows) to `spill`, so that those passes need not read and parse the input again.
    spilled: bool = False
    streamed: bool = False  # a local pass over streamed input: `ahead` may spill its codes
    # Rows as `tallied_matrix` gives them (d + 1 columns, the last the first unusable column):
    # `dropped[j]` counts the rows dropped at column j, and only complete rows go on.
    tallied: int | None = None  # d, or None: complete rows already (nothing counted as dropped)
    n: int = 0
    fine: dict[int, np.ndarray] = field(init=False)
    dropped: np.ndarray = field(init=False)
    ahead: tuple[Any, ...] = field(init=False, default=())
    spill: Spill | None = field(init=False, default=None)

    ANY_ORDER = True  # exact counts; its statistics' and spill's merges too

    def __post_init__(self) -> None:
        if self.spilled:
            self.spill = Spill()
        self.dropped = np.zeros(self.tallied or 0, dtype=np.int64)
        self.fine = {j: histograms(np.empty(0)) for j in self.columns}
        dom = self.domain
        if dom is not None:
            facts = (dom.cube_dim, dom.lead_bits(), dom.cube_codes(), dom.cube_flags())
            missing, clocks = dom.cube_coded_missing(), dom.cube_clocks()
            made = {
                "privtree": lambda: privtree.FirstHistogram(
                    dom.cube_dim, dom.lead_bits(), self.streamed
                ),
                "marginals": lambda: pairs.PairCounts(attributes(*facts, missing, clocks)),
            }
            self.ahead = tuple(made[m]() for m in self.mechanisms)

    def add(self, X: np.ndarray) -> None:
        if self.tallied is not None:
            first = X[:, -1]
            where = first[first != COMPLETE].astype(np.int64)
            if where.size:
                self.dropped += np.bincount(where, minlength=self.tallied)
            X = complete_rows(X)
        self.n += X.shape[0]
        for j in self.columns:
            self.fine[j] += histograms(X[:, j])
        if self.domain is not None:
            X = self.domain.to_cube(X)
        for statistic in self.ahead:
            statistic.add(X)
        if self.spill is not None:
            self.spill.add(X)

    def spills(self) -> list[Spill]:
        """The spill files this pass wrote, its own and its statistics' (closed with the run)."""
        codes = (getattr(a, "codes", None) for a in self.ahead)
        return [s for s in (self.spill, *codes) if s is not None]

    def merge(self, other: CountAndBounds) -> CountAndBounds:
        self.n += other.n
        self.dropped += other.dropped
        for j in self.columns:
            self.fine[j] += other.fine[j]
        for mine, theirs in zip(self.ahead, other.ahead, strict=True):
            mine.merge(theirs)
        if self.spill is not None and other.spill is not None:
            self.spill.merge(other.spill)
        return self


def synthesize(
    data: TableData,
    specs: list[ColumnSpec],
    options: SynthOptions,
    source: RandomSource,
    *,
    rows: Rows | None = None,
    constraints: Sequence[Constraint] = (),
) -> SynthResult:
    """Run the whole private pipeline: a first pass (row count, histograms for DP bounds), then
    the mechanism's own passes over the rows rescaled to [0,1]^d. `rows`, if given, are the
    complete value rows already (e.g. from `engine.dask`); `data` is then not read. The output
    obeys the declared `constraints` whose columns are chosen (`mechanisms.conditioned`).

    Streamed input is read once: the first pass spills what the later passes read (`Spill`:
    the cube rows, or PrivTree's cell codes), and the files go when the release is made."""
    spills: list[Spill] = []
    try:
        return _synthesize(data, specs, options, source, rows, constraints, spills)
    finally:
        for spill in spills:
            spill.close()


def _synthesize(
    data: TableData,
    specs: list[ColumnSpec],
    options: SynthOptions,
    source: RandomSource,
    rows: Rows | None,
    constraints: Sequence[Constraint],
    spills: list[Spill],
) -> SynthResult:
    budget = plan_budget(options, specs, constraints)  # the commands called it before the spend
    constraints, left_out = choose(constraints, specs)
    ledger = Ledger(budget.total, options.relation)
    every = rows if rows is not None else tallied_rows(data, specs)
    # `rows` of d + 1 columns are tallied (`tallied_matrix`); of d columns, complete already.
    tallied = len(specs) if every.d == len(specs) + 1 else None
    raw = every.map(complete_rows, len(specs)) if tallied is not None else every
    streamed = isinstance(raw.source, BatchesSource)  # a local pass (not Dask, not in memory)
    undeclared = tuple(j for j, s in enumerate(specs) if not s.has_bounds)
    dim = lowdim.parse_dim(options.dim, len(specs))
    fallback = None
    others = lowdim.non_numeric(specs)
    if dim is None and others:  # decided from the declarations, before any pass
        dim, fallback = 0, lowdim.fallback_block(lowdim.mixed_reason(others), lowdim.BEFORE)
    # The statistics of the mechanisms that may run on these rows ride on the first pass.
    declared = None if undeclared else Domain(tuple(specs))
    ahead = FIRST_PASS.get(options.mechanism, ()) if dim == 0 and declared else ()
    if ahead and options.mechanism == "auto":  # only what auto may pick from these columns
        cube, levels = declared.cube_dim, bool(declared.lead_bits())
        may = select.candidates(cube, levels, cube - len(declared.cube_flags()))
        ahead = tuple(m for m in ahead if m in may)
    if len(specs) > pairs.MAX_COLUMNS:
        ahead = tuple(m for m in ahead if m != "marginals")
    # Streamed rows that a later pass will read go to a spill (`ahead` spills its own codes).
    spilled = streamed and bool(dim != 0 or undeclared or declared.lead_bits() or not ahead)
    made = partial(CountAndBounds, undeclared, declared, ahead, spilled, streamed, tallied)
    first = every.collect(made)
    spills += first.spills()
    spill = first.spill
    specs, notices = _complete_bounds(first.fine, specs, budget, source, ledger)
    domain = Domain(tuple(specs))
    # The mechanisms' cube: level columns first, split first (`partition`); mapped back below.
    lead = domain.lead_bits()
    if spill is None or not spill.ok:
        X = raw.map(domain.to_cube, domain.cube_dim)
    elif first.domain is not None:  # the spill holds the cube rows
        X = Rows(SpillSource(spill), domain.cube_dim)
    else:  # the spill holds the value rows (bounds were estimated after it)
        X = Rows(SpillSource(spill), len(specs)).map(domain.to_cube, domain.cube_dim)
    X = replace(
        X,
        ahead=first.ahead,
        lead=lead,
        flagged=domain.cube_flags(),
        codes=domain.cube_codes(),
        coded_missing=domain.cube_coded_missing(),
        clocks=domain.cube_clocks(),
    )
    names = [s.name for s in specs]
    determines = [d for d in options.determines if {d.source, d.target} <= set(names)]
    learn = [d for d in determines if d.mapping is None]
    cube_of = {j: i for i, j in enumerate(domain.level_columns)}  # level columns lead the cube
    pairs_ = [(cube_of[names.index(d.source)], cube_of[names.index(d.target)]) for d in learn]
    nullable = {s.name for s in specs if s.nullable}  # a missing source keeps the drawn target
    mapped = [
        names.index(d.target)
        for d in determines
        if d.mapping is not None and d.source not in nullable
    ]
    derived = [names.index(n) for n in always_derived(constraints, specs)] + mapped
    X = replace(
        X, determines=tuple(pairs_), derived=tuple(sorted(domain.cube_column(j) for j in derived))
    )
    n_hat, dropped_hat = noisy_tally(
        first.n,
        first.dropped.tolist() or [0] * len(specs),
        names,
        budget.count,
        source.spawn("count"),
        ledger,
    )
    call = {
        "epsilon": budget.mechanism,
        "noisy_rows": n_hat,
        "relation": options.relation,
        "ledger": ledger,
        "rng": source.spawn("post-processing").numpy_generator(),
        "rows": options.rows,
    }
    reason = lowdim.skip_reason(len(specs), budget.mechanism, n_hat, options.relation)
    if dim is None and reason is not None:  # from public d, eps and the noisy count
        dim, fallback = 0, lowdim.fallback_block(reason, lowdim.BEFORE)
    if dim == 0:  # --dim full: the mechanism on all columns
        run = MECHANISMS[options.mechanism](X, source=source.spawn(options.mechanism), **call)
        if fallback is not None:
            run = replace(run, description={**run.description, "dim_fallback": fallback})
    else:
        inner = MECHANISMS[options.mechanism]
        run = lowdim.run(X, source=source.spawn("lowdim"), dim=dim, inner=inner, **call)
    if lead:
        run = replace(run, output=run.output.map(domain.cube_to_unit, len(specs)))
    if any(d.mapping is not None for d in determines):  # public maps: post-processing
        run = replace(run, output=run.output.map(level_maps(tuple(determines), domain), len(specs)))
    learned = len(run.description.get("learned_maps", ()))
    if constraints:
        run = replace(run, output=conditioned(run.output, Rules(domain, constraints)))
    sample, block = _first_batch(run, constraints, left_out)  # all points when they fit
    sample = np.where(np.isnan(sample), 1.0, sample)  # a missing value where `to_unit` puts it
    floor = empty_floor(budget.count, options.relation)
    scale = count_sensitivity(options.relation) / float(budget.count)
    drop_notices, dropped_named = dropped_notices(specs, n_hat, dropped_hat, scale)
    signal, signal_notices = signal_block(
        sample,
        names,
        run.w1_bound,
        noisy_rows=n_hat,
        empty_floor=floor,
        eps_rows=float(budget.mechanism) * n_hat,
        rows_dropped=dropped_named,
        level_columns=domain.level_columns,
    )
    dim_notices = lowdim.notices(run.description, options.dim.strip().lower())
    notices += weak_guarantee_notice(options.epsilon) + drop_notices + dim_notices
    notices += collapse_notices(domain, sample)
    notices += signal_notices
    notices += [f'constraint "{c}" left out: {why}' for c, why in left_out.items()]
    notices += [
        f'"determines": "{d}" left out: only --mechanism marginals learns a map from the data '
        "(declare the map in the schema to have it obeyed by any mechanism)"
        for d in learn[learned:]
    ]
    result = SynthResult(
        domain, budget, ledger, run, n_hat, signal, notices=notices, constraints=block
    )
    if options.dim.strip().lower() != "full":
        result.dim = lowdim.report_block(options.dim.strip().lower(), run.description, len(specs))
    if options.diagnostics:
        result.diagnostics = _diagnostics(raw.map(domain.to_unit, len(specs)), sample, first.n)
    return result


def _first_batch(
    run: MechanismRun, constraints: Sequence[Constraint], left_out: dict[str, str]
) -> tuple[np.ndarray, dict[str, Any] | None]:
    """The first output batch of at most SIGNAL_ROWS points (the signal check's sample) and,
    with constraints declared, the report's block: how each is enforced and the share of the
    rows drawn for this batch that satisfied them (released values and post-processing only)."""
    batch = next(run.output.plan(SIGNAL_ROWS))
    if not constraints and not left_out:
        return batch.points(run.output.place), None
    block = describe(constraints, left_out)
    if not constraints:
        return batch.points(run.output.place), block
    got = run.output.place.sample(batch.cells, batch.counts, copy.deepcopy(batch.rng))
    block["first_batch"] = {
        "rows": int(got.points.shape[0]),
        "rows_drawn": got.drawn,
        "acceptance_rate": got.accepted / got.drawn if got.drawn else None,
        "note": "the share of rows drawn from the released model for the first output batch "
        "that satisfied every constraint: a function of released values only",
    }
    return got.points, block


def _complete_bounds(
    fine: dict[int, np.ndarray],
    specs: list[ColumnSpec],
    budget: BudgetPlan,
    source: RandomSource,
    ledger: Ledger,
) -> tuple[list[ColumnSpec], list[str]]:
    """DP bounds for columns without declared ones; a notice says what each cost. Every
    undeclared column is estimated (each spend is planned already) before a failure is raised,
    so that the error names every column whose estimate found nothing, not just the first."""
    done, notices, failed = [], [], []
    for j, spec in enumerate(specs):
        if not spec.has_bounds:
            eps = budget.bounds[spec.name]
            try:
                lo, hi = estimate_bounds(
                    fine[j], spec.name, eps, source.spawn(f"bounds:{spec.name}"), ledger
                )
            except NoBoundsFound:
                failed.append(spec.name)
                continue
            if spec.kind == "integer":  # whole numbers; the released upper edge is exclusive
                lo, hi = math.ceil(lo), max(math.ceil(hi) - 1, math.ceil(lo))
            spec = replace(spec, lower=lo, upper=hi, source="dp_estimate")
            notices.append(estimated_notice(spec.name, eps, lo, hi))
        done.append(spec)
    if failed:  # all estimates have the same epsilon (`plan_budget`)
        raise DataError(no_bounds_message(failed, budget.bounds[failed[0]], ledger.relation))
    return done, notices


class _FirstRows:
    """The first `limit` rows a pass sees (for the labelled, non-private diagnostics)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.rows = limit, np.zeros((0, 0))

    def add(self, X: np.ndarray) -> None:
        if self.rows.shape[0] < self.limit:
            take = X[: self.limit - self.rows.shape[0]]
            self.rows = take if self.rows.size == 0 else np.vstack([self.rows, take])

    def merge(self, other: _FirstRows) -> _FirstRows:
        self.add(other.rows)
        return self


def _diagnostics(X: Rows, Y: np.ndarray, n: int) -> dict[str, Any]:
    """Empirical W1 between input and output: reads raw data, so NOT differentially private.
    Beyond SIGNAL_ROWS rows, between the first SIGNAL_ROWS input rows and a random sample of as
    many output rows."""
    from dpsynth_cli.evaluate.w1 import w1_summary

    head = X.collect(partial(_FirstRows, SIGNAL_ROWS)).rows
    return {
        "NOT_DIFFERENTIALLY_PRIVATE": True,
        "warning": "computed from the raw input; do not release",
        "input_rows": int(n),
        "input_rows_note": "the true number of complete rows: private",
        "w1_rows_compared": [int(head.shape[0]), int(Y.shape[0])],
        "w1_unit_cube": w1_summary(head, Y) if head.shape[0] and Y.shape[0] else None,
    }
