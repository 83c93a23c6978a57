"""Declared constraints between columns (issue 23): read from the schema, applied to output rows.

Real records obey rules the synthetic ones should obey too (a discharge is not before the
admission, a total equals its parts). The schema declares them next to its columns:

    {"columns": {...},
     "constraints": ["discharged >= floor(admitted_at)",
                     "length_of_stay == discharged - floor(admitted_at)"]}

A constraint compares two linear expressions with one of <=, >=, <, >, ==. An expression is a
sum (+, -) of terms: a number, a column, a function of columns (below), or a number times one of
these (`2 * a`, `a * 2`). A column name that is not an identifier is quoted with backticks
(`` `length of stay` ``). Only float, integer, date and datetime columns take part, in these
units: a float or integer column its value; a date its days since 1970-01-01; a datetime its
days (with the fraction of the day) since 1970-01-01T00:00 UTC, or since 1970-01-01T00:00
wall-clock time for a column without a time zone. So `floor(admitted_at)` is the calendar date
of a date-time (in UTC for a zoned column) and dates and date-times compare and subtract.

The functions (issue 36, "the calendar is respected"), each a term like a column:
- `floor(c)`: c rounded down.
- calendar parts of a date or datetime column c, read on its wall clock (in its declared time
  zone for a zoned column, as written for one without): `year(c)`, `month(c)` (1-12), `day(c)`
  (day of the month, 1-31), `weekday(c)` (Monday 0 ... Sunday 6), and of a datetime only
  `hour(c)` (0-23) and `minute(c)` (0-59). `"month == month(time_hour)"` derives an integer
  column month from time_hour, so the parts always agree with the date-time; `"hour(t) >= 5"`
  conditions.
- `days_in_month(y, m)` of two integer columns, a year and a month: 28-31 (proleptic
  Gregorian: a leap year is divisible by 4, not by 100 unless by 400). `"day <=
  days_in_month(year, month)"` keeps out Feb 30, Apr 31 and Feb 29 of a non-leap year when the
  parts are separate columns. A month that is not a whole number in 1-12 counts as missing.
A function of a column of the wrong kind (the hour of a date, the days in a month of a float
year) is a usage error naming the constraint, checked against the declared kinds.

An equality with one column alone on one side (the left one if both are) derives that column:
every output row gets it computed from the other side (rounded as the column is written: to a
whole number for an integer or date, whole seconds for a datetime, the column's decimals for a
float). Every other constraint, and a derived value outside its column's bounds, conditions the
output: rows that break it are replaced by fresh rows of the released model
(`mechanisms.conditioned`). A constraint does not apply to a row in which one of its columns is
missing (a nullable column). Constraints are declarations, like the columns: nothing here reads
the data, and enforcing them is post-processing of the release. That holds for the calendar too:
its functions read only released rows and the declared time zone, and no value decides
anything here (a month out of range makes its row's constraint not apply, never an error;
every error is about the declarations and raised before any row is read).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpsynth_cli.errors import UsageError

if TYPE_CHECKING:
    from dpsynth_cli.domain import ColumnSpec

KINDS = ("float", "integer", "date", "datetime")
UNITS_TEXT = (
    "a float or integer column: its value; a date: days since 1970-01-01; a datetime: days "
    "(with the fraction of the day) since 1970-01-01T00:00 UTC, wall-clock for a column without "
    "a time zone; floor(column) rounds down (the calendar date of a datetime); year(c), "
    "month(c) (1-12), day(c) (1-31), weekday(c) (Monday 0 ... Sunday 6) of a date or datetime "
    "and hour(c) (0-23), minute(c) (0-59) of a datetime are read on the column's wall clock "
    "(in its declared time zone); days_in_month(year, month) of two integer columns is 28-31 "
    "(Gregorian leap years), missing for a month outside 1-12"
)
MISSING_TEXT = "a constraint does not apply to a row in which one of its columns is missing"
HOW_TEXT = (
    "a derived column is computed from the other side of its equality in every output row, "
    "rounded as the column is written; a row that breaks another constraint, or whose derived "
    "value falls outside its column's bounds, is replaced by a fresh row drawn from the whole "
    "released model until the batch is full, so the output follows the released measure "
    "restricted to the rows that satisfy every constraint (post-processing: no privacy cost)"
)

_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|`(?P<quoted>[^`]+)`"
    r"|(?P<compare><=|>=|==|<|>)|(?P<punct>[-+*(),]))"
)
_FLIP = {"<=": ">=", ">=": "<=", "<": ">", ">": "<", "==": "=="}


# Calendar parts of a date or datetime column, on its wall clock (`calendar_part`): the kinds of
# column each takes. `floor` takes any column; `days_in_month` two integer columns.
CALENDAR = {
    "year": ("date", "datetime"),
    "month": ("date", "datetime"),
    "day": ("date", "datetime"),
    "weekday": ("date", "datetime"),
    "hour": ("datetime",),
    "minute": ("datetime",),
}
FUNCTIONS = ("floor", *CALENDAR, "days_in_month")


@dataclass(frozen=True)
class Term:
    """A column's value in constraint units, or a function of it: `floor` (rounded down), a
    calendar part (`CALENDAR`: year, month 1-12, day of month 1-31, weekday Monday = 0, hour
    0-23, minute 0-59 on the column's wall clock), or `days_in_month` of the year `column` and
    the month `second` (integer columns)."""

    column: str
    function: str = ""
    second: str | None = None

    @property
    def floor(self) -> bool:
        return self.function == "floor"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,) if self.second is None else (self.column, self.second)

    def __str__(self) -> str:
        if not self.function:
            return self.column
        return f"{self.function}({', '.join(self.columns)})"


@dataclass(frozen=True)
class Constraint:
    """One declared constraint. An inequality reads sum(coefficient * term) + constant OP 0 with
    OP '<=' or '<'; a derivation (OP '==') sets `target` to sum(coefficient * term) + constant.
    `text` is the declaration as written (for messages and the report)."""

    text: str
    terms: tuple[tuple[Term, float], ...]
    constant: float
    op: str
    target: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        names = [n for t, _ in self.terms for n in t.columns]
        names += [self.target] if self.target else []
        return tuple(dict.fromkeys(names))

    @property
    def derives(self) -> bool:
        return self.target is not None


def constraint_error(text: str, why: str, where: str) -> UsageError:
    return UsageError(f'{where}: constraint "{text}": {why}')


def _tokens(text: str, where: str) -> list[tuple[str, str]]:
    """(kind, text) pairs; anything the grammar has no token for is an error."""
    out, at = [], 0
    while at < len(text.rstrip()):
        match = _TOKEN.match(text, at)
        if match is None:
            at += len(text[at:]) - len(text[at:].lstrip())
            raise constraint_error(text, f"cannot read '{text[at]}' (character {at + 1})", where)
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        at = match.end()
    return out


class _Side:
    """The parse of one side: {term: coefficient} and a constant."""

    def __init__(self, tokens: list[tuple[str, str]], text: str, where: str) -> None:
        self.tokens, self.text, self.where, self.at = tokens, text, where, 0
        self.terms: dict[Term, float] = {}
        self.constant = 0.0

    def fail(self, why: str) -> UsageError:
        return constraint_error(self.text, why, self.where)

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.at += 1
        return token

    def parse(self) -> _Side:
        if not self.tokens:
            raise self.fail("a side of the comparison is empty")
        sign = 1.0
        while True:
            while self.peek() in (("punct", "+"), ("punct", "-")):
                sign *= -1.0 if self.take()[1] == "-" else 1.0
            self.product(sign)
            kind, value = self.peek()
            if kind == "end":
                return self
            if (kind, value) not in (("punct", "+"), ("punct", "-")):
                raise self.fail(f"expected + or - before '{value}'")
            sign = 1.0

    def product(self, sign: float) -> None:
        """number, term, or a product of them holding at most one term."""
        factor, term = sign, None
        while True:
            number, found = self.factor()
            if found is not None:
                if term is not None:
                    raise self.fail("a product of two columns is not linear")
                term = found
            factor *= number
            if self.peek() != ("punct", "*"):
                break
            self.take()
        if term is None:
            self.constant += factor
        else:
            self.terms[term] = self.terms.get(term, 0.0) + factor

    def factor(self) -> tuple[float, Term | None]:
        kind, value = self.take()
        if kind == "number":
            number = float(value)
            if not math.isfinite(number):
                raise self.fail(f"the number {value} is not finite")
            return number, None
        if kind == "quoted":
            return 1.0, Term(value)
        if kind == "name" and self.peek() == ("punct", "("):
            return 1.0, self.function(value)
        if kind == "name":
            return 1.0, Term(value)
        shown = value or "the end"
        raise self.fail(f"expected a number or a column at '{shown}'")

    def function(self, name: str) -> Term:
        """`name(column)`, or `days_in_month(year, month)`: the '(' is next."""
        if name not in FUNCTIONS:
            known = ", ".join(f"{f}()" for f in FUNCTIONS)
            raise self.fail(f"unknown function '{name}' (the known ones: {known})")
        self.take()
        arity = 2 if name == "days_in_month" else 1
        example = {
            "floor": "floor(admitted_at)",
            "days_in_month": "days_in_month(year, month)",
        }.get(name, f"{name}(time_hour)")
        names = []
        for closing in [","] * (arity - 1) + [")"]:
            inner, end = self.take(), self.take()
            if inner[0] not in ("name", "quoted") or end != ("punct", closing):
                count = "one column" if arity == 1 else "two columns"
                raise self.fail(f"{name} takes {count}, e.g. {example}")
            names.append(inner[1])
        return Term(names[0], name, names[1] if arity == 2 else None)


def parse_constraint(text: object, where: str) -> Constraint:
    """One declared constraint (grammar in the module docstring); a usage error naming it."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f'{where}: each constraint must be a non-empty string, e.g. "a <= b"')
    tokens = _tokens(text, where)
    compares = [i for i, (kind, _) in enumerate(tokens) if kind == "compare"]
    if len(compares) != 1:
        raise constraint_error(text, "needs exactly one of <=, >=, <, >, ==", where)
    at = compares[0]
    op = tokens[at][1]
    left = _Side(tokens[:at], text, where).parse()
    right = _Side(tokens[at + 1 :], text, where).parse()
    if op == "==":
        return _derivation(text, left, right, where)
    if op in (">=", ">"):  # a >= b is b <= a
        left, right, op = right, left, _FLIP[op]
    terms = dict(left.terms)
    for term, c in right.terms.items():
        terms[term] = terms.get(term, 0.0) - c
    kept = tuple((t, c) for t, c in terms.items() if c != 0.0)
    if not kept:
        raise constraint_error(text, "names no column (or its columns cancel)", where)
    return Constraint(text, kept, left.constant - right.constant, op)


def _lone(side: _Side) -> str | None:
    """The column a side is exactly (coefficient 1, no function, no constant), else None."""
    if side.constant != 0.0 or len(side.terms) != 1:
        return None
    ((term, c),) = side.terms.items()
    return term.column if c == 1.0 and not term.function else None


def _derivation(text: str, left: _Side, right: _Side, where: str) -> Constraint:
    target, expression = _lone(left), right
    if target is None:
        target, expression = _lone(right), left
    if target is None:
        raise constraint_error(
            text,
            "an equality needs one column alone on one side: that column is derived from the "
            "other side",
            where,
        )
    if any(target in t.columns for t in expression.terms):
        raise constraint_error(text, f"column '{target}' is on both sides", where)
    kept = tuple((t, c) for t, c in expression.terms.items() if c != 0.0)
    return Constraint(text, kept, expression.constant, "==", target)


def parse_constraints(
    raw: object, columns: dict[str, ColumnSpec], where: str
) -> tuple[Constraint, ...]:
    """The schema's "constraints" list against its columns: each parsed, its columns known and
    of a kind constraints take (where the schema declares the kind), derivations checked."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UsageError(f'{where}: "constraints" must be a list of strings, e.g. ["a <= b"]')
    parsed = tuple(parse_constraint(text, where) for text in raw)
    for c in parsed:
        for name in c.columns:
            if name not in columns:
                raise constraint_error(c.text, f"column '{name}' is not in the schema", where)
        check_kinds(c, columns, where)
    check_derivations(parsed, where)
    return parsed


def check_kinds(constraint: Constraint, columns: dict[str, ColumnSpec], where: str) -> None:
    """Every column of the constraint must be float, integer, date or datetime, a calendar part's
    a date or datetime (hour and minute: a datetime), days_in_month's integers (a column whose
    kind is not declared yet is checked again once it is resolved)."""
    for name in constraint.columns:
        kind = columns[name].kind if name in columns else ""
        if kind and kind not in KINDS:
            raise constraint_error(
                constraint.text,
                f"column '{name}' is a {kind} column: constraints take float, integer, date "
                "and datetime columns",
                where,
            )
    for term, _ in constraint.terms:
        wanted = CALENDAR.get(term.function)
        if term.function == "days_in_month":
            wanted = ("integer",)
        for name in term.columns if wanted else ():
            kind = columns[name].kind if name in columns else ""
            if kind and kind not in wanted:
                takes = (
                    "integer columns"
                    if term.function == "days_in_month"
                    else (f"{_a(wanted[0])} {' or '.join(wanted)} column")
                )
                raise constraint_error(
                    constraint.text,
                    f"{term.function}() takes {takes}; '{name}' is {_a(kind)} {kind} column",
                    where,
                )


def _a(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def check_derivations(constraints: Sequence[Constraint], where: str) -> None:
    """At most one derivation per column, and no chains: a derived column is not used to derive
    another (its value would depend on the order they are applied in)."""
    derived: dict[str, Constraint] = {}
    for c in constraints:
        if c.target in derived:
            raise constraint_error(
                c.text, f"column '{c.target}' is derived by another constraint too", where
            )
        if c.target is not None:
            derived[c.target] = c
    for c in constraints:
        for name in (n for t, _ in c.terms for n in t.columns) if c.derives else ():
            if name in derived:
                raise constraint_error(
                    c.text,
                    f"column '{name}' is derived (\"{derived[name].text}\") and may not be used "
                    "to derive another column",
                    where,
                )


def choose(
    constraints: Sequence[Constraint], specs: Sequence[ColumnSpec], where: str = "--schema"
) -> tuple[tuple[Constraint, ...], dict[str, str]]:
    """The constraints whose columns are all chosen (kinds checked against the resolved specs),
    and those left out: {text: why}. A left-out constraint names a column the output lacks."""
    by_name = {s.name: s for s in specs}
    kept, left_out = [], {}
    for c in constraints:
        missing = [n for n in c.columns if n not in by_name]
        if missing:
            left_out[c.text] = f"column '{missing[0]}' is not among the chosen columns"
            continue
        check_kinds(c, by_name, where)
        kept.append(c)
    return tuple(kept), left_out


def always_derived(
    constraints: Sequence[Constraint], specs: Sequence[ColumnSpec]
) -> tuple[str, ...]:
    """The columns every output row gets from a derivation: targets whose expression reads no
    nullable column (a missing one would leave the drawn value). A mechanism need not measure
    them: the derivation replaces whatever it drew (post-processing of the other columns)."""
    nullable = {s.name for s in specs if s.nullable}
    return tuple(
        c.target
        for c in constraints
        if c.target is not None and not nullable & (set(c.columns) - {c.target})
    )


def describe(
    constraints: Sequence[Constraint], left_out: dict[str, str] | None = None
) -> dict[str, object]:
    """The report's block (and --dry-run's): the constraints enforced, which derive a column and
    which condition the output by rejection, and those left out (with why)."""
    block = {
        "declared": [c.text for c in constraints],
        "derived": {c.target: c.text for c in constraints if c.derives},
        "conditioned": [c.text for c in constraints if not c.derives],
        "how": HOW_TEXT,
        "units": UNITS_TEXT,
        "missing": MISSING_TEXT,
    }
    if left_out:
        block["left_out"] = left_out
    return block


def evaluate(
    c: Constraint, values: dict[str, np.ndarray], zones: dict[str, str] | None = None
) -> np.ndarray:
    """sum(coefficient * term) + constant per row (NaN where a column is missing); `zones`: the
    time zone of each zoned datetime column (its calendar parts are read on that wall clock)."""
    n = next(iter(values.values())).shape[0] if values else 0
    total = np.full(n, c.constant)
    for term, coefficient in c.terms:
        total += coefficient * term_values(term, values, zones or {})
    if c.target is not None:
        total[np.isnan(values[c.target])] = np.nan
    return total


def term_values(term: Term, values: dict[str, np.ndarray], zones: dict[str, str]) -> np.ndarray:
    """One term per row (NaN where a column is missing)."""
    v = values[term.column]
    if not term.function:
        return v
    if term.function == "floor":
        return np.floor(v)
    if term.function == "days_in_month":
        return days_in_month(v, values[term.second or ""])
    return calendar_part(term.function, v, zones.get(term.column))


SECONDS_PER_DAY = 86400
_MONTH_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.float64)


def days_in_month(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    """The number of days of month `month` (1-12) of year `year` in the proleptic Gregorian
    calendar (a leap year: divisible by 4, not by 100 unless by 400); NaN where either is missing,
    not a whole number, or the month is not 1-12 (the constraint then does not apply)."""
    ok = (month >= 1) & (month <= 12) & (month == np.floor(month)) & (year == np.floor(year))
    index = np.where(ok, month, 1).astype(np.int64) - 1
    leap = ((np.mod(year, 4) == 0) & (np.mod(year, 100) != 0)) | (np.mod(year, 400) == 0)
    days = _MONTH_DAYS[index] + ((index == 1) & leap)
    return np.where(ok, days, np.nan)


def _weekday(stamps: pa.Array) -> pa.Array:
    return pc.day_of_week(stamps, count_from_zero=True, week_start=1)  # Monday 0 ... Sunday 6


_PARTS = {
    "year": pc.year,
    "month": pc.month,
    "day": pc.day,
    "hour": pc.hour,
    "minute": pc.minute,
    "weekday": _weekday,
}


def calendar_part(function: str, days: np.ndarray, zone: str | None) -> np.ndarray:
    """A calendar part (`CALENDAR`) of date or datetime values in constraint units (days since
    the epoch, whole seconds as written), on the wall clock (in `zone` for a zoned datetime,
    whose values are instants): year; month 1-12; day of month 1-31; weekday, Monday 0 to
    Sunday 6; hour 0-23; minute 0-59. NaN where missing."""
    missing = np.isnan(days)
    seconds = np.where(missing, 0.0, np.round(days * SECONDS_PER_DAY)).astype(np.int64)
    stamps = pa.array(seconds, pa.timestamp("s", zone))
    part = _PARTS[function](stamps).to_numpy(zero_copy_only=False).astype(np.float64)
    return np.where(missing, np.nan, part)
