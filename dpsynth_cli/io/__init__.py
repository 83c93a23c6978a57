"""Reading and writing tables (CSV, gzipped CSV, Parquet) with pyarrow, in record batches.

One job per module, so that a change to one stays there: `formats` (names, formats, flags),
`streams` (stdin and pipes spooled, compressed bytes), `csv_read` with `csv_scan` and
`field_cap` (CSV records and their structure checks), `source`, `read` and `memory` (an input
read in passes; Parquet and directories; an in-memory table, cell by cell), `atomic` and `stops`
(files that appear whole, or not at all), `serialise`, `write` and `parts` (tables to files,
stdout and part directories). Callers import from here; docs/architecture.md draws the map.
"""

from __future__ import annotations

from dpsynth_cli.io.atomic import (
    atomic_output,
    atomic_write_bytes,
    fsync_dir,
    move_file,
    process_alive,
    written_in_place,
)
from dpsynth_cli.io.csv_read import CSV_BLOCK_BYTES
from dpsynth_cli.io.field_cap import field_limit
from dpsynth_cli.io.formats import (
    BATCH_VALUE_BYTES,
    DEFAULT_BATCH_ROWS,
    FORMATS,
    STDIN_NAME,
    STDIO,
    STDOUT_NAME,
    OutputClosed,
    check_decimal,
    check_delimiter,
    default_batch_rows,
    delimiter_flag,
    detect_format,
    parquet_files,
)
from dpsynth_cli.io.memory import TableInput
from dpsynth_cli.io.parts import (
    atomic_directory,
    check_part_directory,
    part_directory_format,
    part_name,
    part_suffix,
    write_part,
    write_part_directory,
)
from dpsynth_cli.io.read import open_input, read_input, read_table
from dpsynth_cli.io.source import InputSource, InputTable, check_columns
from dpsynth_cli.io.stops import finished, signals_held, start_run
from dpsynth_cli.io.write import (
    check_outputs,
    write_outputs,
    write_table,
    write_text_stdout,
)

__all__ = [
    "BATCH_VALUE_BYTES",
    "CSV_BLOCK_BYTES",
    "DEFAULT_BATCH_ROWS",
    "FORMATS",
    "STDIN_NAME",
    "STDIO",
    "STDOUT_NAME",
    "InputSource",
    "InputTable",
    "OutputClosed",
    "TableInput",
    "atomic_directory",
    "atomic_output",
    "atomic_write_bytes",
    "check_columns",
    "check_decimal",
    "check_delimiter",
    "check_outputs",
    "check_part_directory",
    "default_batch_rows",
    "delimiter_flag",
    "detect_format",
    "field_limit",
    "finished",
    "fsync_dir",
    "move_file",
    "open_input",
    "parquet_files",
    "part_directory_format",
    "part_name",
    "part_suffix",
    "process_alive",
    "read_input",
    "read_table",
    "signals_held",
    "start_run",
    "write_outputs",
    "write_part",
    "write_part_directory",
    "write_table",
    "write_text_stdout",
    "written_in_place",
]
