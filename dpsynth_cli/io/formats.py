"""What reading and writing share: the formats and their names, stdin/stdout, batch sizes, the
--delimiter flag, and OS errors as reasons that never quote data."""

from __future__ import annotations

import os

from dpsynth_cli.errors import DataError, UsageError

FORMATS = ("csv", "parquet")


STDIO = "-"


STDIN_NAME = "<stdin>"


STDOUT_NAME = "<stdout>"

# Rows per input batch. Per-batch costs (Python calls, numpy and pyarrow dispatch) are amortised
# long before 10^6 rows, and a batch of 10^6 rows x d columns is 8d MB as float64 values, which the
# statistics pass copies a few times (values, unit-cube coordinates, cell indices): about 50-200 MB
# for the usual d <= 16. Wide tables get fewer rows (`default_batch_rows`) so that a batch's values
# stay within BATCH_VALUE_BYTES whatever d is.
DEFAULT_BATCH_ROWS = 1_000_000


BATCH_VALUE_BYTES = 128 << 20

_EXTENSIONS = ((".csv.gz", "csv"), (".csv", "csv"), (".parquet", "parquet"), (".pq", "parquet"))

_PARQUET_SUFFIXES = (".parquet", ".pq")

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst")

_SPOOL_CHUNK = 1 << 20


class OutputClosed(Exception):
    """The reader of stdout went away (e.g. `| head`). Not an error: the CLI exits 0 on it."""

    exit_code = 0


def detect_format(path: str, override: str | None, *, flag: str | None = None) -> str:
    """Return "csv" or "parquet" for `path`: `override` wins, then the extension; "-" is CSV;
    a directory whose files (not hidden) end in Parquet extensions only, or CSV ones only, has
    their format.

    `flag` names the option that overrides it (e.g. "--input-format") in the error message.
    """
    if override is not None:
        fmt = override.strip().lower()
        if fmt not in FORMATS:
            raise UsageError(
                f"{flag or '--input-format/--output-format'}: unknown format '{override}' "
                "(expected csv or parquet)"
            )
        return fmt
    if path == STDIO:
        return "csv"
    lower = path.lower().rstrip("/")
    for ext, fmt in _EXTENSIONS:
        if lower.endswith(ext):
            return fmt
    if os.path.isdir(path):
        found = [
            f
            for f, ends in (("parquet", _PARQUET_SUFFIXES), ("csv", _CSV_SUFFIXES))
            if _directory_files(path, ends)
        ]
        if len(found) == 1:  # a directory of Parquet (or CSV) parts: their names say it
            return found[0]
        what = "both Parquet and CSV files" if found else "no .parquet or .csv files"
        raise UsageError(
            f"{path} is a directory with {what} (for a directory of Parquet or CSV files as the "
            "input, give --input-format parquet or csv)"
        )
    flags = flag or "--input-format or --output-format"
    raise UsageError(
        f"cannot tell the format of {path} from its extension (.csv, .csv.gz, .parquet, .pq); "
        f"name it with {flags} (csv or parquet)"
    )


def default_batch_rows(columns: int) -> int:
    """Rows per batch for `columns` columns: DEFAULT_BATCH_ROWS, fewer for wide tables."""
    return max(1, min(DEFAULT_BATCH_ROWS, BATCH_VALUE_BYTES // (8 * max(columns, 1))))


def parquet_files(directory: str) -> list[str]:
    """The Parquet files of a directory (not its subdirectories), sorted by name, so that every
    pass and every engine sees the rows in the same order."""
    return _directory_files(directory, _PARQUET_SUFFIXES)


def _directory_files(directory: str, suffixes: tuple[str, ...]) -> list[str]:
    """A directory's files (not subdirectories, not hidden) ending in `suffixes`, by name."""
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise DataError(f"cannot read {directory}: {_reason(exc)}") from None
    return [
        os.path.join(directory, n)
        for n in sorted(names)
        if n.lower().endswith(suffixes)
        and not n.startswith(".")
        and os.path.isfile(os.path.join(directory, n))
    ]


def check_delimiter(delimiter: str, fmt: str = "csv") -> str:
    """--delimiter: one ASCII character other than a quote or a line end ('\\t' or 'tab' for a
    tab), for CSV input only."""
    if delimiter == ",":
        return delimiter
    if fmt != "csv":
        raise UsageError("--delimiter is for CSV input")
    if len(delimiter) != 1 or not delimiter.isascii() or delimiter in '"\r\n':
        raise UsageError(
            "--delimiter takes one character other than a quote or a line end, e.g. "
            "--delimiter ';' (a tab: --delimiter tab)"
        )
    return delimiter


def check_decimal(decimal: str, delimiter: str | None, fmt: str = "csv") -> None:
    """A decimal comma cannot be read from a CSV whose fields a comma separates (the default
    when --delimiter is not given)."""
    if decimal == "," and delimiter in (",", None) and fmt == "csv":
        raise UsageError(
            'a decimal comma (--decimal , or the schema\'s "decimal") needs another field '
            "delimiter: give --delimiter ';' (or the file's own)"
        )


def delimiter_flag(text: str | None) -> str | None:
    """The --delimiter value as a character: 'tab' and '\\t' mean a tab; None when not given
    (`open_input` reads a comma, and says when the header looks separated by another)."""
    if text is None:
        return None
    return "\t" if text.strip().lower() in ("tab", "\\t") else text


def _reason(exc: OSError) -> str:
    """The OS's reason for an error (e.g. 'Permission denied'), never a message with data."""
    return exc.strerror or type(exc).__name__
