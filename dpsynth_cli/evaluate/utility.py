"""`evaluate --target`: model utility, the check that shows pairs kept and interactions lost.

A gradient-boosting model (scikit-learn's HistGradientBoosting*, fixed random_state) is trained
once on the synthetic table and once on the real one, and both are scored on the same real rows:
ideally rows that were never synthesised (`--holdout FILE`); without one, a random quarter of
the real table, left out of the real-trained model (the synthesiser read those rows, so the
synthetic model's score may be optimistic; the report says which). A level target (category or
boolean) is scored by AUC: one level against the rest for `COL=LEVEL`, else the mean over the
levels in the scoring rows of each level's one-vs-rest AUC (a two-level column: its AUC). A
number is scored by R^2, of `ln(1 + value)` for `log(COL)` (amounts, skewed).

Features are the other compared columns, encoded from their declarations: levels as categorical
features (codes; more than 254 levels as numbers), numbers as they are, dates and date-times as
numbers (days, seconds), a nullable column's missing value as missing. NOT private: it reads
the real rows (scikit-learn is the optional extra `utility`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dpsynth_cli.domain import CONTINUOUS, LEVEL_KINDS, ColumnSpec
from dpsynth_cli.engine.values import TableData, value_rows
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.privacy.noise import analysis_generator

TRAIN_ROWS = 200_000  # rows each model is trained on at most (a uniform sample beyond)
SCORE_ROWS = 200_000  # scoring rows at most
SPLIT_SHARE = 0.25  # without --holdout: the share of REAL held out for scoring
MAX_CATEGORIES = 254  # HistGradientBoosting's categorical codes (255 bins, one for missing)
RANDOM_STATE = 0
NUMBER_KINDS = ("float", "integer")
INSTALL = "pip install 'dpsynth-cli[utility]'"
_LOG = re.compile(r"^log\((.+)\)$")


@dataclass(frozen=True)
class Target:
    """What `--target` asks for: a column, and a level (`COL=LEVEL`) or log scale (`log(COL)`)."""

    text: str
    column: str
    level: str | None = None
    log: bool = False


def parse_target(text: str) -> Target:
    """`--target COL`, `COL=LEVEL` or `log(COL)` (syntax only; `resolve` checks the column)."""
    value = text.strip()
    log = _LOG.match(value)
    if log:
        return Target(text, log.group(1).strip(), log=True)
    column, sep, level = value.partition("=")
    if not column.strip() or (sep and not level):
        raise UsageError(f"--target '{text}': expected COL, COL=LEVEL or log(COL)")
    return Target(text, column.strip(), level if sep else None)


def request(target: str | None, holdout: bool) -> Target | None:
    """`--target` parsed and scikit-learn found (before any table is read); None without it."""
    if target is None:
        if holdout:
            raise UsageError("--holdout: give --target COL too (the model to score on its rows)")
        return None
    wanted = parse_target(target)
    require_sklearn()
    return wanted


def require_sklearn() -> None:
    """A one-line error naming the extra when scikit-learn cannot be imported."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise UsageError(f"--target needs scikit-learn: {INSTALL}") from None


def resolve(target: Target, specs: list[ColumnSpec]) -> int:
    """The target's index among the compared columns, after checking its kind (usage errors,
    before any row is read when the columns are declared)."""
    names = [s.name for s in specs]
    if target.column not in names:
        raise UsageError(
            f"--target: column '{target.column}' is not among the compared columns "
            f"({', '.join(names)}): add it with --columns or the schema"
        )
    if len(specs) < 2:
        raise UsageError("--target needs at least one other compared column as a feature")
    spec = specs[names.index(target.column)]
    if spec.kind not in LEVEL_KINDS + NUMBER_KINDS:
        raise UsageError(
            f"--target: column '{spec.name}' is a {spec.kind}; give a category, boolean, float "
            "or integer column"
        )
    if target.level is not None and spec.kind != "category":
        raise UsageError(f"--target '{target.text}': COL=LEVEL needs a category column")
    if target.level is not None and target.level not in (spec.levels or ()):
        raise UsageError(
            f"--target '{target.text}': '{target.level}' is not a declared level of '{spec.name}'"
        )
    negative = spec.lower is not None and spec.lower < 0  # bounds from the data come later
    if target.log and (spec.kind not in NUMBER_KINDS or negative):
        raise UsageError(
            f"--target '{target.text}': log(COL) needs a float or integer column with lower "
            "bound >= 0"
        )
    return names.index(target.column)


def sample_rows(
    data: TableData, specs: list[ColumnSpec], size: int, seed: int | None
) -> np.ndarray:
    """A uniform sample of at most `size` complete rows (declared codes) of a table, in one
    pass: each row gets a random key and the rows of the smallest keys are kept."""
    rng = analysis_generator(seed).spawn(1)[0]  # not the split's stream
    return value_rows(data, specs).collect(lambda: _Sample(size, rng, len(specs))).rows


class _Sample:
    """The rows of the `size` smallest random keys (in stream order: the same sample for the
    same seed whatever the batches)."""

    ANY_ORDER = False  # the keys follow the rows' order

    def __init__(self, size: int, rng: np.random.Generator, d: int) -> None:
        self.size, self.rng = size, rng
        self.kept, self.keys = np.empty((0, d)), np.empty(0)

    def add(self, X: np.ndarray) -> None:
        self.kept = np.concatenate([self.kept, X])
        self.keys = np.concatenate([self.keys, self.rng.random(len(X))])
        if len(self.keys) > self.size:
            top = np.argpartition(self.keys, self.size)[: self.size]
            self.kept, self.keys = self.kept[top], self.keys[top]

    def merge(self, other: _Sample) -> _Sample:
        self.add(other.rows)
        return self

    @property
    def rows(self) -> np.ndarray:
        return self.kept[np.argsort(self.keys, kind="stable")]


def model_utility(
    real: np.ndarray,
    synthetic: np.ndarray,
    specs: list[ColumnSpec],
    target: Target,
    holdout: np.ndarray | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """The report's `utility` block: the same model trained on `real` and on `synthetic` (rows
    of declared codes), both scored on `holdout`, or without one on a random SPLIT_SHARE of
    `real` left out of the real-trained model."""
    j = resolve(target, specs)
    rng = analysis_generator(seed)
    if holdout is None:
        order = rng.permutation(len(real))
        cut = int(round(SPLIT_SHARE * len(real)))
        scoring, real = real[order[:cut]], real[order[cut:]]
    else:
        scoring = holdout
    sets = {
        "real": _cap(real, TRAIN_ROWS, rng),
        "synthetic": _cap(synthetic, TRAIN_ROWS, rng),
        "scoring": _cap(scoring, SCORE_ROWS, rng),
    }
    task = _Task(specs, j, target)
    data = {name: task.data(rows, name) for name, rows in sets.items()}
    # One OpenMP thread: scikit-learn's threads spin while they wait, and on a shared machine
    # (other jobs on the cores) a 3,000-row fit took 4x longer with two than with one.
    with threadpool_limits(limits=1, user_api="openmp"):
        scores = {n: task.fit_score(*data[n], *data["scoring"]) for n in ("real", "synthetic")}
    block: dict[str, Any] = {
        "target": target.text,
        "column": target.column,
        **task.describe(),
        "model": f"{task.model_name}(random_state={RANDOM_STATE}), scikit-learn {_version()}",
        "features": {s.name: task.feature_kind(s) for k, s in enumerate(specs) if k != j},
        "scored_on": _scored_on(holdout is not None, len(data["scoring"][1])),
        "trained_on_rows": {name: len(data[name][1]) for name in ("real", "synthetic")},
        "train_real": scores["real"][0],
        "train_synthetic": scores["synthetic"][0],
        "difference": scores["synthetic"][0] - scores["real"][0],
    }
    if scores["real"][1]:
        block["levels"] = {
            level: {"train_real": auc, "train_synthetic": scores["synthetic"][1][level]}
            for level, auc in scores["real"][1].items()
        }
    return block


def _cap(rows: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    return rows if len(rows) <= size else rows[np.sort(rng.choice(len(rows), size, replace=False))]


def _scored_on(holdout: bool, rows: int) -> dict[str, Any]:
    if holdout:
        return {
            "source": "holdout",
            "rows": rows,
            "note": "the --holdout rows: real rows the synthesiser did not read (if so chosen); "
            "the real-trained model learned from all of REAL",
        }
    return {
        "source": "split",
        "share_of_real": SPLIT_SHARE,
        "rows": rows,
        "note": f"a random {SPLIT_SHARE:.0%} of REAL, left out of the real-trained model; the "
        "synthesiser read these rows, so train_synthetic may be optimistic: give --holdout "
        "FILE, real rows that were not synthesised",
    }


def _version() -> str:
    import sklearn

    return sklearn.__version__


def _missing(values: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """Where a nullable number's, date's or date-time's code means missing (past its bounds)."""
    if not spec.nullable or spec.kind in LEVEL_KINDS:
        return np.zeros(len(values), dtype=bool)
    return values > (spec.upper if spec.kind in CONTINUOUS else np.floor(spec.upper))


class _Task:
    """The target's encoding, the features' encoding, and the model for one `--target`."""

    def __init__(self, specs: list[ColumnSpec], j: int, target: Target) -> None:
        self.specs, self.j, self.target = specs, j, target
        self.spec = specs[j]
        self.levels = self.spec.kind in LEVEL_KINDS
        kind = "Classifier" if self.levels else "Regressor"
        self.model_name = f"HistGradientBoosting{kind}"

    def describe(self) -> dict[str, Any]:
        if not self.levels:
            scale = "ln(1 + value)" if self.target.log else "value"
            return {"task": "number", "metric": "r2", "scale": scale}
        if self.target.level is not None:
            what = f"'{self.target.level}' against every other level"
        else:
            what = (
                "each level against the rest, averaged over the levels in the scoring rows "
                "(two levels: the AUC)"
            )
        return {"task": "level", "metric": "auc", "auc": what}

    def feature_kind(self, spec: ColumnSpec) -> str:
        if spec.kind in LEVEL_KINDS:
            return "levels" if self._codes(spec) <= MAX_CATEGORIES else "level codes as numbers"
        return "number" if spec.kind in NUMBER_KINDS else f"{spec.kind} as a number"

    @staticmethod
    def _codes(spec: ColumnSpec) -> int:
        return (2 if spec.kind == "boolean" else len(spec.levels or ())) + spec.nullable

    def data(self, rows: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Features and target of the rows whose target is present."""
        y = rows[:, self.j]
        keep = ~_missing(y, self.spec)
        rows, y = rows[keep], y[keep]
        if len(rows) < 2:
            raise DataError(
                f"--target: the {name} rows hold fewer than two values of '{self.spec.name}'"
            )
        if self.target.level is not None:
            y = (y == (self.spec.levels or ()).index(self.target.level)).astype(np.int64)
        elif self.levels:
            y = y.astype(np.int64)
        else:
            y = np.clip(y, self.spec.lower, self.spec.upper)
            y = np.log1p(y) if self.target.log else y
        columns = []
        for k, spec in enumerate(self.specs):
            if k != self.j:
                values = rows[:, k].copy()
                values[_missing(values, spec)] = np.nan
                columns.append(values)
        return np.column_stack(columns), y

    def fit_score(
        self, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray
    ) -> tuple[float, dict[str, float]]:
        """The model trained on (X, y), scored on the test rows: (score, per-level AUC)."""
        if self.levels:
            return self._auc(X, y, X_test, y_test)
        from sklearn.metrics import r2_score

        return float(r2_score(y_test, self._model().fit(X, y).predict(X_test))), {}

    def _model(self) -> Any:
        from sklearn import ensemble

        mask = [self.feature_kind(s) == "levels" for k, s in enumerate(self.specs) if k != self.j]
        make = getattr(ensemble, self.model_name)
        return make(random_state=RANDOM_STATE, categorical_features=np.array(mask))

    def _auc(
        self, X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray
    ) -> tuple[float, dict[str, float]]:
        from sklearn.metrics import roc_auc_score

        present = np.unique(y_test)
        if present.size < 2:
            raise DataError(
                f"--target: the scoring rows hold one level of '{self.spec.name}': no AUC"
            )
        classes = np.unique(y)
        proba = (
            self._model().fit(X, y).predict_proba(X_test)
            if classes.size > 1
            else np.ones((len(X_test), 1))  # one level only: the same score for every row
        )
        aucs = {}
        for level in present:
            hit = np.flatnonzero(classes == level)
            score = proba[:, hit[0]] if hit.size else np.zeros(len(X_test))
            aucs[self._name(int(level))] = float(roc_auc_score(y_test == level, score))
        if self.target.level is not None or present.size == 2:
            positive = self._name(int(present[-1]))
            return aucs[positive], {}
        return float(np.mean(list(aucs.values()))), aucs

    def _name(self, code: int) -> str:
        if self.target.level is not None:
            return self.target.level if code == 1 else f"not {self.target.level}"
        if self.spec.kind == "boolean":
            return ("false", "true", "missing")[code]
        levels = self.spec.levels or ()
        return levels[code] if code < len(levels) else "missing"


def summary_lines(block: dict[str, Any]) -> list[str]:
    """The `utility` block in plain words for the evaluate summary."""
    metric = "AUC" if block["metric"] == "auc" else "R^2"
    where = block["scored_on"]
    rows = f"{where['rows']:,} real rows"
    if where["source"] == "split":
        rows += (
            f" ({where['share_of_real']:.0%} of REAL held out; the synthesiser read them, so the "
            "synthetic model's score may be optimistic: give --holdout FILE)"
        )
    else:
        rows += " of --holdout"
    return [
        f"model utility, target {block['target']} ({metric}, {block['model'].split('(')[0]}): "
        f"trained on real {block['train_real']:.3f}, on synthetic {block['train_synthetic']:.3f}; "
        f"scored on {rows}"
    ]
