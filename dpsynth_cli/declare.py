"""Which columns a run reads, and as what, from declarations only (flags, schema, file structure).

The chosen columns are those of --columns, else the schema's, else those that --bounds and
--integer name, else every column of a CSV header or every numeric column a Parquet file
declares. A column's type is the schema's, else `--integer`, else the Parquet column's, else
float (a CSV's text declares no type). One row cannot change any of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa

from dpsynth_cli.columns import (
    DRAFT_HINT,
    ColumnSpec,
    arrow_kind,
    arrow_time_kind,
    is_text,
    parse_bounds_flag,
)
from dpsynth_cli.constraints import Constraint
from dpsynth_cli.determines import Dependency
from dpsynth_cli.errors import UsageError
from dpsynth_cli.schema_file import (
    load_constraints,
    load_decimal,
    load_determines,
    load_schema,
    parse_decimal,
)


def requested_columns(
    columns_flag: str | None,
    schema: dict[str, ColumnSpec] | None,
    flagged: list[str] | None = None,
) -> tuple[list[str] | None, str]:
    """The columns the user declared, and by what: --columns, else the schema's columns, else
    the columns that --bounds / --integer name (`flagged`, in order); None: the file decides."""
    if columns_flag is not None:
        names = parse_names(columns_flag, "--columns")
        if not names:
            raise UsageError("--columns: give at least one column name, e.g. --columns age,income")
        return names, "--columns"
    if schema:
        return list(schema), "schema"
    if flagged:
        return list(dict.fromkeys(flagged)), "--bounds/--integer"
    return None, ""


@dataclass(frozen=True)
class Declared:
    """What --columns, --schema, --bounds and --integer declare (read before any row)."""

    names: list[str] | None  # None: the file's structure decides
    columns_from: str
    schema: dict[str, ColumnSpec] | None
    bounds: dict[str, tuple[float, float]]
    integers: list[str]
    constraints: tuple[Constraint, ...] = ()
    decimal: str = "."  # --decimal or the schema's "decimal": float and integer text cells
    determines: tuple[Dependency, ...] = ()  # the schema's "determines"

    def with_decimal(self, choice: ColumnChoice) -> ColumnChoice:
        """The choice with this decimal separator on its float and integer columns."""
        if self.decimal == ".":
            return choice
        specs = [
            replace(s, decimal=self.decimal) if s.kind in ("float", "integer") else s
            for s in choice.specs
        ]
        return replace(choice, specs=specs)

    def resolve(
        self,
        table_schema: pa.Schema,
        *,
        typed: bool,
        all_columns: list[str] | None = None,
        numbers_only: str | None = None,
    ) -> ColumnChoice:
        """`resolve_columns` with these declarations. `numbers_only` names a command that reads
        float and integer columns only (pca, online-replay): a Parquet boolean is then the
        integer 0/1 as before issue 15, and another declared type is a usage error."""
        choice = resolve_columns(
            table_schema,
            self.names,
            self.schema,
            self.bounds,
            typed=typed,
            integers=self.integers,
            columns_from=self.columns_from,
            all_columns=all_columns,
        )
        choice = self.with_decimal(choice)
        if numbers_only is None:
            return choice
        specs, other = [], []
        for s in choice.specs:
            if s.kind == "boolean" and s.kind_source == "Parquet schema":
                s = ColumnSpec(s.name, "integer", kind_source=s.kind_source, decimal=self.decimal)
            elif s.kind not in ("float", "integer") or s.nullable:
                other.append(f"'{s.name}' is {'nullable' if s.nullable else s.kind}")
            specs.append(s)
        if other:  # every offending column at once, from the declarations only
            raise UsageError(
                f"{numbers_only} reads float and integer columns: {', '.join(other)}; leave "
                f"{'it' if len(other) == 1 else 'them'} out with --columns"
            )
        return replace(choice, specs=specs)


def declare_columns(
    columns: str | None,
    schema: str | None,
    bounds: list[str] | None,
    integer: str | None = None,
    decimal: str | None = None,
) -> Declared:
    """The column flags of synth, pca and online-replay, parsed once the same way. `decimal`:
    --decimal, else the schema's top-level "decimal", else "."."""
    specs = load_schema(schema) if schema else None
    declared = {name: (lo, hi) for name, lo, hi in map(parse_bounds_flag, bounds or [])}
    integers = parse_names(integer, "--integer")
    names, columns_from = requested_columns(columns, specs, [*declared, *integers])
    constraints = load_constraints(schema) if schema else ()
    if decimal is None:
        decimal = load_decimal(schema) if schema else "."
    sep = parse_decimal(decimal, "--decimal")
    determines = load_determines(schema) if schema else ()
    return Declared(names, columns_from, specs, declared, integers, constraints, sep, determines)


def parse_names(text: str | None, flag: str) -> list[str]:
    """A comma-separated list of column names from a flag; a name given twice is an error."""
    names = [c.strip() for c in (text or "").split(",") if c.strip()]
    if len(set(names)) != len(names):
        raise UsageError(f"{flag}: a column is named twice")
    return names


@dataclass(frozen=True)
class ColumnChoice:
    """The chosen columns and, for the report, where they came from and what was left out."""

    specs: list[ColumnSpec]
    columns_from: str
    left_out: dict[str, str]

    def to_json(self) -> dict:
        return {
            "columns_from": self.columns_from,
            "types_from": {s.name: s.kind_source for s in self.specs},
            "left_out": self.left_out,
        }


def resolve_columns(
    table_schema: pa.Schema,
    names: list[str] | None,
    schema: dict[str, ColumnSpec] | None,
    bounds: dict[str, tuple[float, float]],
    *,
    typed: bool,
    integers: list[str] | None = None,
    columns_from: str = "",
    all_columns: list[str] | None = None,
) -> ColumnChoice:
    """Column specs from declarations only: flags, schema file, and the file's structure.

    `typed` says whether the file declares column types (Parquet) or not (CSV, all text). The
    column set is `names` when given; else every CSV column, or every Parquet column of a
    numeric type (the others are left out, with the reason). A column's kind is the schema's
    type, else `--integer`, else the Parquet type, else float. A declared type the tool cannot
    read as a number (a timestamp, a list) is a usage error: it is structure, not data.
    `all_columns` (the file's, when only some were read) lists what the user left out. The
    chosen columns are in the file's order, whatever order --columns or the schema name them in.
    """
    left_out: dict[str, str] = {}
    if names is None:
        names = []
        for f in table_schema:
            if not typed or arrow_kind(f.type) is not None:
                names.append(f.name)
            else:
                left_out[f.name] = f"type {f.type} in the file's schema is not numeric"
        columns_from = "every numeric column of the Parquet schema" if typed else "CSV header"
        if not names:
            raise UsageError("the input declares no numeric column: choose columns with --columns")
    else:
        every = all_columns or table_schema.names
        left_out = {n: f"not named by {columns_from}" for n in every if n not in names}
        position = {n: i for i, n in enumerate(every)}  # the output keeps the input's order
        names = sorted(names, key=lambda n: position.get(n, len(position)))
    for flag, given in (("--bounds", bounds), ("--integer", integers or [])):
        for name in given:
            if name not in names:
                raise UsageError(f"{flag}: column '{name}' is not among the chosen columns")
    specs = []
    for name in names:
        dtype = table_schema.field(name).type
        if pa.types.is_dictionary(dtype):
            dtype = dtype.value_type
        file_kind = (arrow_kind(dtype) or arrow_time_kind(dtype)) if typed else None
        declared = (schema or {}).get(name)
        if declared and declared.kind:
            kind, kind_source = declared.kind, "schema"
        elif name in (integers or []):
            kind, kind_source = "integer", "--integer"
        elif file_kind:  # a Parquet boolean given --bounds is read as a number, as it was
            numeric = file_kind == "boolean" and name in bounds
            kind, kind_source = "integer" if numeric else file_kind, "Parquet schema"
        else:
            kind, kind_source = "float", "default (float)"
        if kind in ("float", "integer") and arrow_time_kind(dtype):
            raise UsageError(
                f"column '{name}' has type {dtype} in the input's schema: declare it as a "
                "date or datetime column"
            )
        if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
            # bytes are not text: a cell that is not UTF-8 would have no reading at all
            raise UsageError(
                f"column '{name}' has type {dtype} in the input's schema: dpsynth reads text "
                "from string columns; write the column as string"
            )
        if kind_source != "schema" and file_kind is None and not is_text(dtype):
            raise UsageError(
                f"column '{name}' has type {dtype} in the input's schema: declare its type "
                f"in --schema ({DRAFT_HINT})"
            )
        if kind in ("date", "datetime", "category") and kind_source != "schema":
            raise UsageError(
                f"column '{name}' is a {kind} column: declare it in --schema with its "
                f"{'levels' if kind == 'category' else 'bounds'} ({DRAFT_HINT})"
            )
        if kind == "boolean" and kind_source != "schema":
            declared = ColumnSpec(name, kind, 0.0, 1.0, levels=("false", "true"))
        spec = replace(declared or ColumnSpec(name, kind), kind=kind, kind_source=kind_source)
        if name in bounds:
            if kind not in ("float", "integer"):
                raise UsageError(f"--bounds: column '{name}' is a {kind} column, not a number")
            spec = replace(spec, lower=bounds[name][0], upper=bounds[name][1], source="declared")
        if kind != "integer" and name in (integers or []):
            raise UsageError(f"--integer: column '{name}' is declared {kind} in the schema")
        specs.append(spec)
    return ColumnChoice(specs, columns_from, left_out)
