"""Streaming input and output (issue 11): batches from any batch size and any CSV block size equal
the one-batch read; CSV errors keep their physical line numbers when they lie in a later block;
a directory of Parquet files, compressed and piped inputs, several passes; the streaming writer
writes what the table writer writes, atomically, also when the batches fail midway."""

from __future__ import annotations

import gzip
import io as pyio
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dpsynth_cli import io as dio
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io import csv_read, field_cap, serialise, streams
from tests.test_io import closing_stdout_early

SECRET = "987654.321"  # a data value that must never appear in an error message


def write_bytes(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def data_error(func, *args, **kwargs) -> str:
    """Run `func`, expect a one-line DataError without data values; return its message."""
    with pytest.raises(DataError) as info:
        func(*args, **kwargs)
    msg = str(info.value)
    assert SECRET not in msg and "987654" not in msg and "\n" not in msg
    return msg


def read_batches(path: str, fmt: str = "csv", columns=None, **kwargs) -> list[pa.RecordBatch]:
    with dio.open_input(path, fmt, columns, **kwargs) as source:
        return list(source.batches())


def table_of(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(batches, schema=schema)


def mixed_csv(n: int = 500) -> bytes:
    """A CSV with quoted fields (commas, line breaks, quotes), empty fields, blank lines, CRLF."""
    rng = np.random.default_rng(1)
    lines = ['"id","x","note"']
    for i in range(n):
        x = "" if i % 17 == 0 else f"{rng.normal():.6f}"
        note = ["plain", '"a, b"', '"two\nlines"', '"say ""hi"""', '""', ""][i % 6]
        lines.append(f"{i},{x},{note}")
        if i % 50 == 0:
            lines.append("")
    return ("\r\n".join(lines[:100]) + "\r\n" + "\n".join(lines[100:]) + "\n").encode()


@pytest.fixture
def small_blocks(monkeypatch):
    """pyarrow's CSV block size, small enough that a test file spans many blocks."""

    def set_block(size: int) -> None:
        monkeypatch.setattr(csv_read, "CSV_BLOCK_BYTES", size)

    return set_block


# --------------------------------------------------------------------------- batches


@pytest.mark.parametrize("name", ["m.csv", "m.csv.gz"])
@pytest.mark.parametrize("block", [64, 100, 333, 1 << 20])
def test_csv_batches_of_any_size_equal_the_whole_read(tmp_path, small_blocks, name, block):
    raw = mixed_csv()
    path = write_bytes(tmp_path / name, gzip.compress(raw) if name.endswith(".gz") else raw)
    whole = dio.read_table(path, "csv", None)
    assert whole.num_rows == 500 and whole.schema.types == [pa.string()] * 3
    assert whole.column("note").to_pylist()[:6] == [
        "plain",
        "a, b",
        "two\nlines",
        'say "hi"',
        None,
        None,
    ]
    small_blocks(block)
    for rows in (1, 7, 64, 1000):
        batches = read_batches(path, columns=["note", "id"], batch_rows=rows)
        assert all(0 < b.num_rows <= rows for b in batches)
        assert table_of(batches, batches[0].schema).equals(whole.select(["note", "id"]))


def test_parquet_batches_of_any_size_equal_the_whole_read(tmp_path):
    rng = np.random.default_rng(2)
    table = pa.table({"a": rng.integers(0, 9, 1000), "b": rng.random(1000), "c": ["x"] * 1000})
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=130)
    for rows in (1, 50, 130, 999, 5000):
        batches = read_batches(path, "parquet", ["b", "a"], batch_rows=rows)
        assert all(0 < b.num_rows <= rows for b in batches)
        assert table_of(batches, batches[0].schema).equals(table.select(["b", "a"]))


def test_source_schema_and_columns(tmp_path):
    path = write_bytes(tmp_path / "t.csv", b"a,b,c\n1,2,3\n")
    with dio.open_input(path, "csv", ["c", "a"]) as source:
        assert source.schema == pa.schema([("c", pa.string()), ("a", pa.string())])
        assert source.all_columns == ["a", "b", "c"] and source.name == path
        assert source.batch_rows == dio.DEFAULT_BATCH_ROWS
    ppath = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"i": pa.array([1], pa.int16()), "f": [0.5]}), ppath)
    with dio.open_input(ppath, "parquet", ["f", "i"], batch_rows=3) as source:
        assert source.schema.types == [pa.float64(), pa.int16()] and source.batch_rows == 3
        assert source.all_columns == ["i", "f"]


def test_passes_read_again_from_the_start(tmp_path, small_blocks):
    small_blocks(64)
    path = write_bytes(tmp_path / "m.csv", mixed_csv(200))
    with dio.open_input(path, "csv", None, batch_rows=30) as source:
        first = table_of(list(source.batches()), source.schema)
        pairs = zip(source.batches(), source.batches(), strict=True)  # two passes at once
        assert all(a.equals(b) for a, b in pairs)
        assert table_of(list(source.batches()), source.schema).equals(first)
        assert first.num_rows == 200


def test_default_batch_rows_bounds_a_batch_of_values():
    assert dio.default_batch_rows(2) == dio.DEFAULT_BATCH_ROWS
    wide = dio.default_batch_rows(10_000)
    assert 0 < wide < dio.DEFAULT_BATCH_ROWS and wide * 10_000 * 8 <= dio.BATCH_VALUE_BYTES
    with pytest.raises(UsageError):
        dio.open_input("x.csv", "csv", None, batch_rows=0)


def test_header_only_and_no_header_stream(tmp_path, small_blocks):
    small_blocks(32)
    path = write_bytes(tmp_path / "h.csv", b"\xef\xbb\xbf\n\r\nlong_name_a,long_name_b")
    with dio.open_input(path, "csv", None) as source:
        assert list(source.batches()) == [] and source.all_columns == ["long_name_a", "long_name_b"]
    path = write_bytes(tmp_path / "n.csv", b"1,2\n3,4\n\n5,\n" * 5)
    batches = read_batches(path, columns=["p", "q"], header=False, batch_rows=4)
    table = table_of(batches, batches[0].schema)
    assert table.column("q").to_pylist() == ["2", "4", None] * 5


# --------------------------------------------------------------------------- CSV errors


def long_csv(rows: int, bad_line: int, bad: str) -> bytes:
    """`rows` data rows after a header; line `bad_line` (header = 1) replaced by `bad`."""
    lines = ["a,b"] + [f"{i},{i * 0.5}" for i in range(rows)]
    lines[bad_line - 1] = bad
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("block", [32, 100, 1 << 20])
@pytest.mark.parametrize(
    ("bad", "what"),
    [
        (f"1,{SECRET},3", "too many fields (expected 2 like the header, found 3)"),
        (f"{SECRET}", "too few fields (expected 2 like the header, found 1)"),
        (f"7,{SECRET}\xff", "invalid UTF-8 (the file must be UTF-8 encoded)"),
    ],
)
def test_error_in_a_later_block_has_its_physical_line(tmp_path, small_blocks, block, bad, what):
    small_blocks(block)
    path = str(tmp_path / "bad.csv")
    data = long_csv(300, 250, bad)
    with open(path, "wb") as fh:
        fh.write(data.decode().encode("latin-1") if "\xff" in bad else data)
    seen: list[str] = []
    with pytest.raises(DataError) as info:  # a small file fails when opened, a large one later
        with dio.open_input(path, "csv", None, batch_rows=16) as source:
            for batch in source.batches():
                seen += batch.column("a").to_pylist()
    assert str(info.value) == f"{path}: line 250: {what}"
    assert "7" not in seen[240:] and len(seen) < 248  # no row of the bad record, none after it


@pytest.mark.parametrize("block", [40, 1 << 20])
def test_line_numbers_count_quoted_line_breaks_and_blank_lines(tmp_path, small_blocks, block):
    small_blocks(block)
    head = 'a,b\n"x\ny",1\n\n\r\n' + "".join(f'{i},"q\nq"\n' for i in range(40))
    path = write_bytes(tmp_path / "q.csv", (head + f"{SECRET}\n1,2\n").encode())
    # 1 header + 2 (quoted break) + 2 blank + 40 x 2 lines = 85 lines before the bad one
    assert data_error(dio.read_table, path, "csv", None) == (
        f"{path}: line 86: too few fields (expected 2 like the header, found 1)"
    )
    path = write_bytes(tmp_path / "u.csv", (head + f'9,"{SECRET}\n1,2\n').encode())
    assert data_error(dio.read_table, path, "csv", ["a"]) == (
        f'{path}: line 86: unterminated quoted field (missing closing ")'
    )


def test_error_lines_in_gzip_and_stdin(tmp_path, small_blocks, monkeypatch):
    small_blocks(50)
    data = long_csv(100, 77, SECRET)
    path = write_bytes(tmp_path / "bad.csv.gz", gzip.compress(data))
    assert f"{path}: line 77: too few fields" in data_error(dio.read_table, path, "csv", None)
    monkeypatch.setattr(sys, "stdin", pyio.TextIOWrapper(pyio.BytesIO(data)))
    assert "<stdin>: line 77: too few fields" in data_error(dio.read_table, "-", "csv", None)


def test_unterminated_quote_early_in_a_long_file(tmp_path, small_blocks):
    """pyarrow would carry the open field block after block; it is reported where it opens."""
    small_blocks(64)
    path = write_bytes(tmp_path / "u.csv", long_csv(2000, 3, f'1,"{SECRET}'))
    msg = data_error(dio.read_table, path, "csv", None)
    assert msg == f'{path}: line 3: unterminated quoted field (missing closing ")'


def test_a_row_longer_than_a_block(tmp_path, small_blocks):
    """Issue 22, finding 1: a row of any length is read; its fields longer than the limit
    (here (64 - 2) // 2 - 1 = 30 bytes) are missing, the others are kept, wherever the row
    falls in the blocks. A row with more fields than the header that no block can hold is
    still a field-count error at its line; a header longer than a block is an error too."""
    small_blocks(64)
    assert dio.field_limit(64, 2) == 30
    path = write_bytes(tmp_path / "l.csv", long_csv(50, 30, f'1,"{"x" * 300}"'))
    table = dio.read_table(path, "csv", None)
    assert table.num_rows == 50 and table.column("a")[28].as_py() == "1"
    assert table.column("b")[28].as_py() is None and table.column("b")[27].as_py() == "13.5"
    edge = f"{'9' * 30},{'8' * 30}"  # both fields at the limit: kept, and the row fills a block
    path = write_bytes(tmp_path / "e.csv", long_csv(50, 30, edge).replace(b"\n", b"\r\n"))
    assert dio.read_table(path, "csv", None).column("b")[28].as_py() == "8" * 30
    path = write_bytes(tmp_path / "m.csv", long_csv(50, 30, ",".join(["7" * 30] * 3)))
    assert data_error(dio.read_table, path, "csv", None) == (
        f"{path}: line 30: too many fields (expected 2 like the header, found 3)"
    )
    path = write_bytes(tmp_path / "h.csv", b"a" * 70 + b",b\n1,2\n")
    assert data_error(dio.read_table, path, "csv", None) == (
        f"{path}: line 1: the header line is longer than 64 bytes, the most dpsynth reads at once"
    )


def test_header_problems_are_found_when_opening(tmp_path, small_blocks):
    small_blocks(32)
    path = write_bytes(tmp_path / "h.csv", b"a,\xffb\n" + long_csv(50, 2, "1,2")[4:])
    assert f"{path}: line 1: invalid UTF-8" in data_error(dio.open_input, path, "csv", None)
    path = write_bytes(tmp_path / "q.csv", b'a,"b\n' + long_csv(50, 2, "1,2")[4:])
    assert "line 1: unterminated" in data_error(dio.open_input, path, "csv", None)
    path = write_bytes(tmp_path / "n.csv", long_csv(50, 1, "1.5,2"))
    assert "numbers, not column names" in data_error(dio.open_input, path, "csv", None)


def test_no_malformed_row_reaches_a_batch(tmp_path, small_blocks):
    """The batch holding a malformed record is held back: the error comes first."""
    small_blocks(200)
    path = write_bytes(tmp_path / "u.csv", long_csv(3000, 3001, f'9,"{SECRET}'))
    with dio.open_input(path, "csv", None) as source, pytest.raises(DataError) as info:
        for batch in source.batches():
            assert SECRET not in str(batch.to_pydict())
    assert str(info.value) == f'{path}: line 3001: unterminated quoted field (missing closing ")'


# --------------------------------------------------------------------------- a reference parser


def reference(data: bytes) -> dict[str, object]:
    """pyarrow's CSV rules walked one byte at a time: the records (start line, fields, bytes),
    the quoted field still open at the end (its line) and the line of the first invalid UTF-8
    byte. Independent of io.py's vectorised scan; for small inputs only."""
    records: list[tuple[int, int, int]] = []
    widths: list[list[int]] = []  # each record's field lengths (bytes, quotes included)
    line, start_line, start, fields, content, at_start, inside = 1, 1, 0, 1, False, True, False
    opened, field_start, width = None, 0, []
    i, n = 0, len(data)
    while i < n:
        c, nxt = data[i], data[i + 1] if i + 1 < n else -1
        ends_line = c == 10 or (c == 13 and nxt != 10)
        if inside:
            if c == 34:
                if nxt == 34:
                    i += 1
                else:
                    inside = False
            elif ends_line:
                line += 1
        elif c == 34 and at_start:
            inside, opened, content, at_start = True, line, True, False
        elif c == 44:
            fields, content, at_start = fields + 1, True, True
            width.append(i - field_start)
            field_start = i + 1
        elif ends_line:
            if content:
                records.append((start_line, fields, i + 1 - start))
                crlf = c == 10 and i > 0 and data[i - 1] == 13  # the CR ends the field
                widths.append([*width, i - field_start - crlf])
            line += 1
            start_line, start, fields, content, at_start = line, i + 1, 1, False, True
            field_start, width = i + 1, []
        elif c != 13:
            content, at_start = True, False
        i += 1
    if content:
        records.append((start_line, fields, n - start))
        widths.append([*width, n - field_start])
    try:
        data.decode("utf-8")
        bad_utf8 = None
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        bad_utf8 = 1 + before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n")
    return {
        "records": records,
        "widths": widths,
        "open": opened if inside else None,
        "utf8": bad_utf8,
    }


def expected_error(ref: dict[str, object]) -> tuple[int, str] | None:
    records = ref["records"]
    problems = []
    if ref["utf8"] is not None:
        problems.append((ref["utf8"], "invalid UTF-8 (the file must be UTF-8 encoded)"))
    ncols = records[0][1]
    wrong = [r for r in records[1:] if r[1] != ncols]
    last_is_open = ref["open"] is not None
    if wrong and not (last_is_open and wrong[0] is records[-1]):
        kind = "too many fields" if wrong[0][1] > ncols else "too few fields"
        problems.append(
            (wrong[0][0], f"{kind} (expected {ncols} like the header, found {wrong[0][1]})")
        )
    elif last_is_open:
        problems.append((ref["open"], 'unterminated quoted field (missing closing ")'))
    return min(problems) if problems else None


def test_reference_walk_agrees_on_random_files(tmp_path, monkeypatch):
    """Random bytes with quotes, line ends and invalid UTF-8: the streaming reader finds the first
    problem the reference finds, at the same line, in any block size that holds every record;
    on clean input it reads what pyarrow reads in one piece."""
    rng = random.Random(11)
    alphabet = [b"a", b"1", b",", b'"', b"\n", b"\r", b"\r\n", b'""', b" ", b"\xc3\xa9", b"\xff"]
    alphabet += [b"\n\n", b"1,2\n", b"x,y,z\n", b'"q\nq",1\n', b"2.5"]
    path = str(tmp_path / "f.csv")
    checked = 0
    for _ in range(600):
        body = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 50)))
        data = rng.choice([b"", b"a,b\n", b"\n\na,b\r\n"]) + body
        ref = reference(data)
        if not ref["records"]:
            continue  # empty inputs: their own tests
        longest = max(r[2] for r in ref["records"])
        block = rng.randint(longest + 1, longest + 80)
        monkeypatch.setattr(csv_read, "CSV_BLOCK_BYTES", block)
        write_bytes(tmp_path / "f.csv", data)
        want = expected_error(ref)
        try:
            got = dio.read_table(path, "csv", None)
        except DataError as exc:
            if "appears more than once" in str(exc) or "numbers, not column names" in str(exc):
                continue  # header checks (tested elsewhere) come before the rows' structure
            assert want is not None and str(exc) == f"{path}: line {want[0]}: {want[1]}", data
        else:
            assert want is None, data
            one = pacsv.read_csv(
                pa.py_buffer(data.lstrip(b"\r\n") + b"\n"),
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(
                    column_types={c: pa.string() for c in got.column_names},
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=True,
                    null_values=[""],
                ),
            )
            limit = dio.field_limit(block, ref["records"][0][1])
            assert got.equals(capped(one, ref["widths"][1:], limit)), data
        checked += 1
    assert checked > 400


def capped_reference(data: bytes, limit: int, header: bool = True) -> bytes:
    """`data` with every field after the first record (the header; every field if not
    `header`) that is longer than `limit` bytes replaced by "", walked one byte at a time with
    pyarrow's quote rules."""
    out, n, i = bytearray(), len(data), 0
    start, inside, at_start = 0, False, True
    while i < n:
        c = data[i]
        if inside:
            if c == 34:
                if i + 1 < n and data[i + 1] == 34:
                    i += 1
                else:
                    inside = False
        elif c == 34 and at_start:
            inside = True
        elif c in (44, 10, 13):
            long = i - start > limit and not header
            out += b'""' if long else data[start:i]
            out.append(c)
            header = header and c == 44
            start, at_start = i + 1, True
            i += 1
            continue
        at_start = False
        i += 1
    out += b'""' if n - start > limit and not header else data[start:]
    return bytes(out)


def fed(cap, pieces: list[bytes]) -> bytes:
    """What `cap` passes on when fed `pieces` in turn."""
    out = []
    for k, piece in enumerate(pieces):
        out += cap.feed(piece, pieces[k + 1][0] if k + 1 < len(pieces) else -1)
    return b"".join(out)


def test_field_cap_agrees_with_a_byte_walk_in_any_blocks():
    """`_FieldCap` (vectorised, streaming, with a fast path for blocks without quotes) rewrites
    exactly what the byte walk rewrites, whatever the pieces it is fed in: long fields (also
    quoted ones with line breaks, and ones longer than several pieces) become "", the header
    is kept whole and sets the limit."""
    rng = random.Random(5)
    tokens = [b"a", b"1", b",", b"\n", b"\r", b"\r\n", b"x" * 7, b"y" * 40, b"2.5,"]
    quoted = [b'"', b'""', b'"q,\nq"', b'"' + b"z" * 30 + b'"', b'"""', b'a"b', b',"']
    for trial in range(600):
        alphabet = tokens + (quoted if trial % 3 else [])
        header = rng.choice([b"h\n", b"h,i\n", b"h,i,j\r\n", b'"h,1",i\n'])
        data = header + b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        block = rng.randint(12, 80)
        cap = field_cap._FieldCap(block, None)
        pieces, at = [], 0
        while at < len(data):
            size = rng.choice([1, 3, 16, 64, 4096])
            pieces.append(data[at : at + size])
            at += size
        got = fed(cap, pieces)
        fields = header.count(b",") + 1 - header.startswith(b'"h,1"')  # a comma in quotes
        assert cap.limit == dio.field_limit(block, fields), (header, block)
        assert got == capped_reference(data, cap.limit), (data, block, pieces)
        headless = field_cap._FieldCap(block, 2)  # --no-header: every record is data
        got = fed(headless, pieces)
        assert got == capped_reference(data, dio.field_limit(block, 2), header=False), data


def capped(table: pa.Table, widths: list[list[int]], limit: int) -> pa.Table:
    """`table` with the cells whose field is longer than `limit` bytes missing."""
    columns = []
    for j, column in enumerate(table.columns):
        cells = column.to_pylist()
        cells = [None if w[j] > limit else v for v, w in zip(cells, widths, strict=True)]
        columns.append(pa.array(cells, pa.string()))
    return pa.table(columns, names=table.column_names)


# --------------------------------------------------------------------------- Parquet directories


def write_parts(root, tables: dict[str, pa.Table]) -> None:
    root.mkdir(exist_ok=True)
    for name, table in tables.items():
        pq.write_table(table, root / name, row_group_size=40)


def test_parquet_directory_in_name_order(tmp_path):
    root = tmp_path / "ds"
    parts = {
        f"part-{i}.parquet": pa.table({"a": np.arange(i * 100, i * 100 + 100)}) for i in (2, 0, 1)
    }
    write_parts(root, parts)
    (root / "_SUCCESS").write_text("")
    (root / "notes.txt").write_text("not data")
    (root / ".hidden.parquet").write_text("not parquet")
    (root / "sub").mkdir()
    table = dio.read_table(str(root), "parquet", None)
    assert table.column("a").to_pylist() == list(range(300))
    batches = read_batches(str(root), "parquet", ["a"], batch_rows=33)
    assert max(b.num_rows for b in batches) <= 33 and sum(b.num_rows for b in batches) == 300
    assert dio.parquet_files(str(root)) == [str(root / f"part-{i}.parquet") for i in range(3)]
    with dio.open_input(str(root), "parquet", None) as source:
        assert source.num_rows == 300 and source.name == str(root)


def test_parquet_directory_schemas_must_agree(tmp_path):
    root = tmp_path / "ds"
    write_parts(root, {"a.parquet": pa.table({"x": [1.5]}), "b.parquet": pa.table({"x": [1]})})
    msg = data_error(dio.open_input, str(root), "parquet", None)
    assert msg.startswith(f"{root / 'b.parquet'}: its columns or their types differ from ")
    write_parts(root, {"b.parquet": pa.table({"y": [1.5]})})
    assert str(root / "b.parquet") in data_error(dio.open_input, str(root), "parquet", None)


def test_empty_or_corrupt_parquet_directory(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    assert "without .parquet" in data_error(dio.open_input, str(root), "parquet", None)
    write_parts(root, {"a.parquet": pa.table({"x": [1.5]})})
    (root / "b.parquet").write_bytes(b"PAR1 garbage")
    assert str(root / "b.parquet") in data_error(dio.open_input, str(root), "parquet", None)
    assert dio.detect_format(str(root), None) == "parquet"  # its files' extensions say it
    (root / "c.csv").write_text("x\n1\n")
    with pytest.raises(UsageError, match="--input-format parquet"):
        dio.detect_format(str(root), None)
    assert dio.detect_format(str(tmp_path / "ds.parquet") + "/", None) == "parquet"


# --------------------------------------------------------------------------- pipes and stdin


def test_stdin_is_spooled_and_read_twice(monkeypatch, small_blocks):
    small_blocks(64)
    data = mixed_csv(100)
    monkeypatch.setattr(sys, "stdin", pyio.TextIOWrapper(pyio.BytesIO(data)))
    with dio.open_input("-", "csv", ["x"], batch_rows=7) as source:
        assert source.name == "<stdin>"
        one = table_of(list(source.batches()), source.schema)
        two = table_of(list(source.batches()), source.schema)
    assert one.equals(two) and one.num_rows == 100


def test_stdin_parquet_and_gzip_pipe(tmp_path, monkeypatch):
    sink = pa.BufferOutputStream()
    table = pa.table({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]})
    pq.write_table(table, sink, row_group_size=1)
    monkeypatch.setattr(
        sys, "stdin", pyio.TextIOWrapper(pyio.BytesIO(sink.getvalue().to_pybytes()))
    )
    with dio.open_input("-", "parquet", ["b"], batch_rows=2) as source:
        assert [b.num_rows for b in source.batches()] == [2, 1]
        assert table_of(list(source.batches()), source.schema).equals(table.select(["b"]))
    fifo = tmp_path / "fifo.csv.gz"
    os.mkfifo(fifo)
    payload = gzip.compress(b"a,b\n1,2.5\n3,\n")
    writer = subprocess.Popen(
        [sys.executable, "-c", f"open({str(fifo)!r}, 'wb').write({payload!r})"]
    )
    try:
        with dio.open_input(str(fifo), "csv", None) as source:
            for _ in range(2):
                assert table_of(list(source.batches()), source.schema).to_pydict() == {
                    "a": ["1", "3"],
                    "b": ["2.5", None],
                }
    finally:
        assert writer.wait(timeout=30) == 0


def test_spool_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(streams.tempfile, "tempdir", None)
    monkeypatch.setattr(sys, "stdin", pyio.TextIOWrapper(pyio.BytesIO(b"a\n1\n")))
    with dio.open_input("-", "csv", None) as source:
        assert os.listdir(tmp_path) == []  # anonymous while in use
        assert table_of(list(source.batches()), source.schema).num_rows == 1


# --------------------------------------------------------------------------- writing batches


def synthetic(n: int = 1000) -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table({"age": rng.integers(-5, 90, n), "income": rng.normal(0, 1e5, n)})


def as_batches(table: pa.Table, size: int) -> list[pa.RecordBatch]:
    return table.to_batches(max_chunksize=size)


@pytest.mark.parametrize("name", ["o.csv", "o.csv.gz", "o.parquet"])
@pytest.mark.parametrize("size", [1, 77, 5000])
def test_streamed_output_equals_table_output(tmp_path, monkeypatch, name, size):
    monkeypatch.setattr(serialise, "CSV_CHUNK_ROWS", 100)
    table = synthetic().replace_schema_metadata({"dpsynth.release": "NOT FOR RELEASE"})
    fmt = dio.detect_format(name, None)
    ref, out = str(tmp_path / f"ref-{name}"), str(tmp_path / name)
    dio.write_outputs(table, ref, fmt, input_path=None)
    plain = table.replace_schema_metadata(None)
    dio.write_outputs(iter(as_batches(plain, size)), out, fmt, input_path=None, schema=table.schema)
    if fmt == "csv":
        assert open(out, "rb").read() == open(ref, "rb").read()
    else:
        back = pq.read_table(out)
        assert back.equals(table) and back.schema.metadata == {
            b"dpsynth.release": b"NOT FOR RELEASE"
        }
        groups = pq.ParquetFile(out).metadata.num_row_groups
        assert groups == 1  # small batches are gathered into row groups
    assert sorted(os.listdir(tmp_path)) == sorted([name, f"ref-{name}"])


def test_parquet_row_groups_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(serialise, "ROW_GROUP_ROWS", 250)
    out = str(tmp_path / "o.parquet")
    dio.write_outputs(iter(as_batches(synthetic(), 100)), out, "parquet", input_path=None)
    meta = pq.ParquetFile(out).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [300] * 3 + [100]


def test_empty_stream_needs_a_schema(tmp_path):
    schema = synthetic().schema
    for name in ("e.csv", "e.parquet"):
        out = str(tmp_path / name)
        dio.write_outputs(
            iter([]), out, dio.detect_format(name, None), input_path=None, schema=schema
        )
        back = dio.read_table(out, dio.detect_format(name, None), None)
        assert back.num_rows == 0 and back.column_names == ["age", "income"]
    with pytest.raises(ValueError):
        dio.write_outputs(iter([]), str(tmp_path / "x.csv"), "csv", input_path=None)
    bad = pa.record_batch({"age": [1.5], "income": [2.0]})
    with pytest.raises(ValueError):
        dio.write_outputs([bad], str(tmp_path / "x.csv"), "csv", input_path=None, schema=schema)
    assert sorted(os.listdir(tmp_path)) == ["e.csv", "e.parquet"]


def failing(table: pa.Table, after: int):
    """The batches of `table`, failing after `after` of them (a synthesis that breaks)."""
    for k, batch in enumerate(as_batches(table, 100)):
        if k == after:
            raise RuntimeError("synthesis failed")
        yield batch


@pytest.mark.parametrize("name", ["o.csv", "o.csv.gz", "o.parquet"])
def test_failing_batches_leave_nothing(tmp_path, monkeypatch, name):
    monkeypatch.setattr(serialise, "CSV_CHUNK_ROWS", 10)
    out, report = tmp_path / name, tmp_path / "r.json"
    out.write_bytes(b"previous")
    with pytest.raises(RuntimeError, match="synthesis failed"):
        dio.write_outputs(
            failing(synthetic(), 4),
            str(out),
            dio.detect_format(name, None),
            input_path=None,
            extra={str(report): "{}", str(tmp_path / "d.json"): lambda: "never"},
        )
    assert out.read_bytes() == b"previous"
    assert sorted(os.listdir(tmp_path)) == [name]


def test_extra_functions_run_after_the_batches(tmp_path):
    written: list[int] = []

    def batches():
        for batch in as_batches(synthetic(), 300):
            written.append(batch.num_rows)
            yield batch

    out, report = tmp_path / "o.csv", tmp_path / "o.csv.report.json"
    dio.write_outputs(
        batches(),
        str(out),
        "csv",
        input_path=None,
        extra={str(report): lambda: f'{{"rows": {sum(written)}}}'},
    )
    assert report.read_text() == '{"rows": 1000}'
    assert dio.read_table(str(out), "csv", None).num_rows == 1000


class FakeStdout:
    def __init__(self, buffer):
        self.buffer = buffer

    def flush(self):
        pass

    def fileno(self):
        return self.buffer.fileno()


def test_stdout_stream_is_staged_behind_the_report(tmp_path, monkeypatch):
    sink = pyio.BytesIO()
    monkeypatch.setattr(sys, "stdout", FakeStdout(sink))
    report = tmp_path / "r.json"
    with pytest.raises(RuntimeError):
        dio.write_outputs(
            failing(synthetic(), 3), "-", "csv", input_path=None, extra={str(report): "{}"}
        )
    assert sink.getvalue() == b"" and os.listdir(tmp_path) == []  # nothing, not a part
    dio.write_outputs(
        iter(as_batches(synthetic(), 64)),
        "-",
        "csv",
        input_path=None,
        extra={str(report): lambda: "{}"},
    )
    ref = pyio.BytesIO()
    monkeypatch.setattr(sys, "stdout", FakeStdout(ref))
    dio.write_outputs(synthetic(), "-", "csv", input_path=None)
    assert sink.getvalue() == ref.getvalue() and report.read_text() == "{}"


def test_stdout_parquet_stream(monkeypatch):
    sink = pyio.BytesIO()
    monkeypatch.setattr(sys, "stdout", FakeStdout(sink))
    dio.write_outputs(iter(as_batches(synthetic(), 64)), "-", "parquet", input_path=None)
    assert pq.read_table(pa.py_buffer(sink.getvalue())).equals(synthetic())


def test_closed_stdout_keeps_the_report(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np, pyarrow as pa
        from dpsynth_cli import io as dio
        table = pa.table({{"x": np.arange(300_000), "y": np.arange(300_000) * 0.5}})
        try:
            dio.write_outputs(iter(table.to_batches(50_000)), "-", "csv", input_path=None,
                              extra={{{str(tmp_path / "r.json")!r}: lambda: "{{}}"}})
        except dio.OutputClosed:
            sys.exit(42)
        """
    )
    code, head, stderr = closing_stdout_early(script, timeout=60)
    assert code == 42, stderr
    assert head.startswith(b'"x","y"') and (tmp_path / "r.json").read_text() == "{}"
