"""Tests for dpsynth_cli.io: formats, strict CSV reading, atomic writing, stdout."""

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

import dpsynth_cli
from dpsynth_cli import io as dio
from dpsynth_cli.domain import column_values
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io import atomic, csv_scan, serialise

SECRET = "987654.321"  # a distinctive data value that must never appear in an error message


def secret_rows(n: int = 3) -> str:
    return "".join(f"{i},{SECRET}\n" for i in range(n))


def write_bytes(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def error_of(exc_type, func, *args, **kwargs) -> str:
    """Run `func`, expect `exc_type`, check the message is one line without data; return it."""
    with pytest.raises(exc_type) as info:
        func(*args, **kwargs)
    assert type(info.value) is exc_type
    msg = str(info.value)
    assert SECRET not in msg and "987654" not in msg
    assert "\n" not in msg
    return msg


def sample_table(n: int = 50) -> pa.Table:
    rng = np.random.default_rng(0)
    ints = pa.array(rng.integers(-1000, 1000, n), type=pa.int64())
    floats = pa.array(rng.normal(0, 1e6, n))
    return pa.table({"age": ints, "income": floats})


def listdir(path) -> list[str]:
    return sorted(os.listdir(path))


# --------------------------------------------------------------------------- format detection


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("data.csv", "csv"),
        ("DATA.CSV", "csv"),
        ("dir/data.csv.gz", "csv"),
        ("data.parquet", "parquet"),
        ("data.pq", "parquet"),
        ("-", "csv"),
    ],
)
def test_detect_format_by_extension(path, fmt):
    assert dio.detect_format(path, None) == fmt


def test_detect_format_override_wins():
    assert dio.detect_format("data.csv", "parquet") == "parquet"
    assert dio.detect_format("data.bin", "CSV") == "csv"
    assert dio.detect_format("-", "parquet") == "parquet"


@pytest.mark.parametrize("path", ["data.tsv", "data.txt", "data", "data.gz", "data.json"])
def test_detect_format_unknown_extension(path):
    msg = error_of(UsageError, dio.detect_format, path, None)
    assert path in msg and "--input-format" in msg and "--output-format" in msg


def test_detect_format_names_the_given_flag():
    msg = error_of(UsageError, dio.detect_format, "out.xlsx", None, flag="--output-format")
    assert "out.xlsx" in msg and "--output-format" in msg and "--input-format" not in msg


def test_detect_format_bad_override():
    msg = error_of(UsageError, dio.detect_format, "data.csv", "xlsx")
    assert "xlsx" in msg


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.parquet", "t.pq"])
def test_round_trip(tmp_path, name):
    table = sample_table()
    path = str(tmp_path / name)
    fmt = dio.detect_format(path, None)
    dio.write_table(table, path, fmt, input_path=None)
    back = dio.read_table(path, fmt, None)
    # CSV declares no types: its columns come back as text; Parquet keeps the declared types
    text = pa.string()
    assert back.schema.types == ([text, text] if fmt == "csv" else [pa.int64(), pa.float64()])
    assert back.column_names == ["age", "income"]
    assert column_values(back.column("age")).tolist() == table.column("age").to_pylist()
    np.testing.assert_allclose(
        column_values(back.column("income")), table.column("income").to_numpy()
    )
    assert listdir(tmp_path) == [name]  # no temporary file left behind


def test_csv_gz_output_is_gzip(tmp_path):
    path = str(tmp_path / "t.csv.gz")
    dio.write_table(sample_table(), path, "csv", input_path=None)
    with open(path, "rb") as fh:
        assert fh.read(2) == b"\x1f\x8b"
    assert gzip.decompress(open(path, "rb").read()).startswith(b'"age","income"\n')


def test_read_from_pipe_path(tmp_path):
    """A named pipe (like bash's <(zcat data.csv.gz)) has size 0 until read; CSV and Parquet."""
    for fmt, data in [("csv", b"a,b\n1,2.5\n"), ("parquet", None)]:
        fifo = tmp_path / f"fifo.{fmt}"
        os.mkfifo(fifo)
        if data is None:
            sink = pa.BufferOutputStream()
            pq.write_table(pa.table({"a": [1], "b": [2.5]}), sink)
            data = sink.getvalue().to_pybytes()
        writer = subprocess.Popen(
            [sys.executable, "-c", f"open({str(fifo)!r}, 'wb').write({data!r})"]
        )
        try:
            back = dio.read_table(str(fifo), fmt, None)
            assert {c: column_values(back.column(c)).tolist() for c in "ab"} == {
                "a": [1],
                "b": [2.5],
            }
        finally:
            assert writer.wait(timeout=30) == 0


def test_gzip_input_with_override(tmp_path):
    path = tmp_path / "data.gz"
    path.write_bytes(gzip.compress(b"a,b\n1,2.5\n3,\n"))
    table = dio.read_table(str(path), dio.detect_format(str(path), "csv"), None)
    assert table.to_pydict() == {"a": ["1", "3"], "b": ["2.5", None]}


def test_empty_table_round_trip(tmp_path):
    table = sample_table().slice(0, 0)
    for name in ["e.csv", "e.parquet"]:
        path = str(tmp_path / name)
        dio.write_table(table, path, dio.detect_format(path, None), input_path=None)
        back = dio.read_table(path, dio.detect_format(path, None), None)
        assert back.num_rows == 0 and back.column_names == ["age", "income"]


def test_csv_is_text_and_empty_fields_are_null(tmp_path):
    """No type is guessed from values: one row must not change a column's type."""
    path = write_bytes(tmp_path / "t.csv", b"i,f,s\n1,1.5,x\n,2,\n3,,y\n4,inf,z\n")
    table = dio.read_table(path, "csv", None)
    assert table.schema.types == [pa.string()] * 3
    assert table.to_pydict() == {
        "i": ["1", None, "3", "4"],
        "f": ["1.5", "2", None, "inf"],
        "s": ["x", None, "y", "z"],
    }


def test_na_markers_stay_text(tmp_path):
    path = write_bytes(tmp_path / "t.csv", b"x,s\n1.5,NA\nNA,b\nNaN,\n")
    table = dio.read_table(path, "csv", None)
    assert table.to_pydict() == {"x": ["1.5", "NA", "NaN"], "s": ["NA", "b", None]}
    assert np.isnan(column_values(table.column("x"))[1:]).all()


def test_column_selection_csv(tmp_path):
    path = write_bytes(tmp_path / "t.csv", ("a,b,c\n" + "1,2.5,x\n" * 3).encode())
    table = dio.read_table(path, "csv", ["c", "a"])
    assert table.column_names == ["c", "a"]
    assert table.schema.types == [pa.string(), pa.string()]


def test_column_selection_parquet(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"a": [1, 2], "b": [0.5, 1.5], "c": ["x", "y"]}), path)
    table = dio.read_table(path, "parquet", ["b", "a"])
    assert table.column_names == ["b", "a"]
    assert table.schema.types == [pa.float64(), pa.int64()]


def test_parquet_keeps_declared_types(tmp_path):
    """The file's declared types reach the domain as they are; values never change them."""
    path = str(tmp_path / "t.parquet")
    narrow = pa.table(
        {
            "i8": pa.array([1, 2], pa.int8()),
            "u32": pa.array([1, 2], pa.uint32()),
            "f32": pa.array([0.5, 1.5], pa.float32()),
            "u64": pa.array([1, 2**63 + 5], pa.uint64()),
        }
    )
    pq.write_table(narrow, path)
    table = dio.read_table(path, "parquet", None)
    assert table.schema == narrow.schema
    assert column_values(table.column("u64")).tolist() == [1.0, float(2**63 + 5)]


def test_header_only_csv_has_zero_rows(tmp_path):
    for data in [b"a,b\n", b"a,b", b"a,b\r\n\n\n"]:
        table = dio.read_table(write_bytes(tmp_path / "h.csv", data), "csv", None)
        assert table.num_rows == 0 and table.column_names == ["a", "b"]


def test_bom_crlf_blank_lines_and_quoted_fields(tmp_path):
    data = b'\xef\xbb\xbf"a","b"\r\n1,"x, y"\r\n\r\n2,"line\nbreak"\r\n3,"say ""hi"""\r\n'
    table = dio.read_table(write_bytes(tmp_path / "q.csv", data), "csv", None)
    assert table.to_pydict() == {"a": ["1", "2", "3"], "b": ["x, y", "line\nbreak", 'say "hi"']}


def test_stdin_is_csv(monkeypatch):
    fake = pyio.TextIOWrapper(pyio.BytesIO(b"a,b\n1,2.5\n"))
    monkeypatch.setattr(sys, "stdin", fake)
    table = dio.read_table("-", dio.detect_format("-", None), None)
    assert table.to_pydict() == {"a": ["1"], "b": ["2.5"]}


def test_stdin_error_names_stdin(monkeypatch):
    fake = pyio.TextIOWrapper(pyio.BytesIO(f"a,b\n1,2\n{SECRET}\n".encode()))
    monkeypatch.setattr(sys, "stdin", fake)
    msg = error_of(DataError, dio.read_table, "-", "csv", None)
    assert "<stdin>" in msg and "line 3" in msg


# --------------------------------------------------------------------------- read errors


def test_unknown_column(tmp_path):
    data = "a,b,c\n" + secret_rows().replace("\n", ",1\n")
    path = write_bytes(tmp_path / "t.csv", data.encode())
    msg = error_of(UsageError, dio.read_table, path, "csv", ["a", "zz"])
    assert msg == f"column 'zz' not found in {path} (available: a, b, c)"


def test_unknown_column_parquet(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"a": [987654.321], "b": [1]}), path)
    msg = error_of(UsageError, dio.read_table, path, "parquet", ["zz"])
    assert "'zz'" in msg and path in msg and "a, b" in msg


def test_duplicate_header_is_refused(tmp_path):
    path = write_bytes(tmp_path / "t.csv", ("a,a\n" + secret_rows()).encode())
    msg = error_of(DataError, dio.read_table, path, "csv", None)
    assert "'a'" in msg and path in msg


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.csv")
    assert path in error_of(DataError, dio.read_table, path, "csv", None)
    assert path in error_of(DataError, dio.read_table, path, "parquet", None)


def test_directory(tmp_path):
    path = str(tmp_path)
    assert path in error_of(DataError, dio.read_table, path, "csv", None)
    assert path in error_of(DataError, dio.read_table, path, "parquet", None)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_empty_file(tmp_path, fmt):
    path = write_bytes(tmp_path / f"empty.{fmt}", b"")
    msg = error_of(DataError, dio.read_table, path, fmt, None)
    assert path in msg and "empty" in msg


def test_blank_lines_only(tmp_path):
    path = write_bytes(tmp_path / "blank.csv", b"\n\r\n\n")
    assert "empty" in error_of(DataError, dio.read_table, path, "csv", None)


def test_garbage_parquet(tmp_path):
    path = write_bytes(tmp_path / "bad.parquet", f"a,b\n1,{SECRET}\n".encode() * 10)
    assert path in error_of(DataError, dio.read_table, path, "parquet", None)


def test_truncated_parquet(tmp_path):
    path = str(tmp_path / "cut.parquet")
    pq.write_table(pa.table({"a": [987654.321] * 100}), path)
    data = open(path, "rb").read()
    write_bytes(tmp_path / "cut.parquet", data[: len(data) // 2])
    assert path in error_of(DataError, dio.read_table, path, "parquet", None)


def test_corrupt_gzip(tmp_path):
    good = gzip.compress(("a,b\n" + secret_rows(1000)).encode())
    path = write_bytes(tmp_path / "bad.csv.gz", good[: len(good) // 2])
    assert path in error_of(DataError, dio.read_table, path, "csv", None)


@pytest.mark.parametrize(
    ("data", "line", "what"),
    [
        # too many fields on line 4
        (f"a,b\n1,{SECRET}\n2,3\n4,{SECRET},5\n6,7\n", 4, "too many fields"),
        # too few fields on line 3
        (f"a,b\n1,{SECRET}\n{SECRET}\n4,5\n", 3, "too few fields"),
        # no final newline
        (f"a,b\n1,2\n3,{SECRET},4", 3, "too many fields"),
        # an unterminated quote at the start of a field on line 3
        (f'a,b\n1,2\n"{SECRET},4\n5,6\n', 3, "unterminated"),
        # ... and in the middle of a line (would otherwise swallow the rest of the file)
        (f'a,b\n1,2\n3,"{SECRET}\n5,6\n', 3, "unterminated"),
        (f'a,b\n1,2\n3,4\n5,"{SECRET}', 4, "unterminated"),
        # physical lines: a quoted field spanning lines and blank lines still count
        (f'a,b\n"x\ny",1\n\n{SECRET}\n', 5, "too few fields"),
        (f'a,b\n"x\ny",1\n\n{SECRET},1,2\n', 5, "too many fields"),
        # CRLF and lone CR line ends
        (f"a,b\r\n1,2\r\n{SECRET}\r\n", 3, "too few fields"),
        (f"a,b\r1,2\r3,4\r{SECRET}\r", 4, "too few fields"),
        # a literal quote inside an unquoted field (pyarrow accepts it) before the bad row
        (f'a,b\n12" x,1\n"ab"cd,2\n{SECRET}\n', 4, "too few fields"),
        # a quoted delimiter is not a field separator
        (f'a,b\n"1,2",3\n"4,5",6,{SECRET}\n', 3, "too many fields"),
    ],
)
def test_malformed_csv_line_numbers(tmp_path, data, line, what):
    path = write_bytes(tmp_path / "bad.csv", data.encode())
    msg = error_of(DataError, dio.read_table, path, "csv", None)
    assert f"line {line}:" in msg and what in msg and path in msg


def test_malformed_csv_in_requested_column_subset(tmp_path):
    path = write_bytes(tmp_path / "bad.csv", f"a,b,c\n1,2,3\n4,{SECRET}\n".encode())
    assert "line 3" in error_of(DataError, dio.read_table, path, "csv", ["a"])


def test_malformed_gzip_csv_line_number(tmp_path):
    data = ("a,b\n" + "1,2\n" * 9 + f"{SECRET}\n").encode()
    path = write_bytes(tmp_path / "bad.csv.gz", gzip.compress(data))
    assert "line 11" in error_of(DataError, dio.read_table, path, "csv", None)


def test_invalid_utf8_line_number(tmp_path):
    data = f"a,b\n1,{SECRET}\nx,4\ny,5\n\xff{SECRET},6\n7,8\n".encode("latin-1")
    path = write_bytes(tmp_path / "latin1.csv", data)
    msg = error_of(DataError, dio.read_table, path, "csv", None)
    assert "line 5" in msg and "UTF-8" in msg


def test_invalid_utf8_in_unselected_column_and_truncated_sequence(tmp_path):
    path = write_bytes(tmp_path / "u.csv", "a,b\n1,é\n2,\u20ac\n3,x".encode() + b"\xe2\x82")
    assert "line 4" in error_of(DataError, dio.read_table, path, "csv", ["a"])


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1 << 24])
def test_invalid_utf8_found_across_chunk_boundaries(chunk):
    lines = "a,b\n1,é\n2,\u20ac\n\U0001f600,x\n".encode().split(b"\n")
    for bad_line in range(1, 5):
        broken = list(lines)
        broken[bad_line - 1] += b"\xc3"  # a lead byte without its continuation
        data = b"\n".join(broken)
        offset = _first_invalid(data, chunk)
        assert offset is not None
        assert data[offset] == 0xC3 and data[:offset].count(b"\n") == bad_line - 1
    assert _first_invalid(b"\n".join(lines), chunk) is None


def _first_invalid(data: bytes, chunk: int) -> int | None:
    check = csv_scan._Utf8()
    starts = range(0, len(data), chunk)
    for off in starts:
        found = check.check(data[off : off + chunk], off, final=off + chunk >= len(data))
        if found is not None:
            return found
    return None


def test_valid_utf8_is_fine(tmp_path):
    path = write_bytes(tmp_path / "u.csv", "a,b\n1,é\n2,\u20ac\n".encode())
    assert dio.read_table(path, "csv", None).column("b").to_pylist() == ["é", "\u20ac"]


def test_first_problem_in_file_order_wins(tmp_path):
    path = write_bytes(tmp_path / "u.csv", b"a,b\n1,2\n3\n\xff,4\n")
    assert "line 3" in error_of(DataError, dio.read_table, path, "csv", None)
    path = write_bytes(tmp_path / "u.csv", b"a,b\n1,2\n\xff,3\n4\n")
    assert "line 3" in error_of(DataError, dio.read_table, path, "csv", None)


def test_scan_agrees_with_pyarrow_on_random_input():
    """The record scan (the error path's line finder) counts the records pyarrow parses, and
    gives the same answers whatever the blocks it is fed in."""
    rng = random.Random(7)
    alphabet = [b"a", b"1", b",", b'"', b"\n", b"\r", b"\r\n", b'""', b" "]
    for _ in range(700):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 25)))
        whole = _scan(data, len(data) + 1)
        for block in (1, 2, 5):
            assert _scan(data, block) == whole, (data, block)
        if whole["open"] is not None:
            continue  # unterminated: pyarrow silently accepts it
        invalid: list[object] = []

        def handler(row, invalid=invalid):
            invalid.append(row.number)
            return "skip"

        try:
            table = pacsv.read_csv(
                pa.py_buffer(data + b"\n"),
                read_options=pacsv.ReadOptions(use_threads=False, autogenerate_column_names=True),
                parse_options=pacsv.ParseOptions(
                    newlines_in_values=True, invalid_row_handler=handler
                ),
            )
        except pa.ArrowInvalid:  # empty input
            assert whole["records"] == 0, data
            continue
        assert whole["records"] == table.num_rows + len(invalid), data


def _scan(data: bytes, block: int) -> dict[str, object]:
    """Feed `data` to the record scan in blocks; what it found."""
    scan = csv_scan._CsvScan(block, want=2, utf8=True)
    pieces = [data[i : i + block] for i in range(0, len(data), block)]
    for k, piece in enumerate(pieces):
        scan.feed(piece, pieces[k + 1][0] if k + 1 < len(pieces) else -1)
    scan.finish()
    opening = scan.opening if scan.state != csv_scan._OUT else None
    return {
        "records": scan.records,
        "lines": scan.lines,
        "second": (scan.want_line, scan.want_ended),
        "open": None if opening is None else (opening.offset, opening.line, opening.rank),
    }


# --------------------------------------------------------------------------- atomic writing


def test_failed_csv_write_leaves_nothing(tmp_path, monkeypatch):
    real = pacsv.write_csv
    calls = []

    def flaky(table, sink, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk on fire")
        return real(table, sink, *args, **kwargs)

    monkeypatch.setattr(serialise, "CSV_CHUNK_ROWS", 10)
    monkeypatch.setattr(serialise.pacsv, "write_csv", flaky)
    out = str(tmp_path / "out.csv")
    with pytest.raises(RuntimeError):
        dio.write_table(sample_table(100), out, "csv", input_path=None)
    assert len(calls) == 3  # it failed midway, after two chunks were written
    assert listdir(tmp_path) == []


def test_failed_write_keeps_previous_output(tmp_path, monkeypatch):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"previous")

    class Full(pq.ParquetWriter):
        def write_table(self, *args, **kwargs):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(serialise.pq, "ParquetWriter", Full)
    with pytest.raises(DataError, match="No space left"):
        dio.write_table(sample_table(), str(out), "parquet", input_path=None)
    assert out.read_bytes() == b"previous"
    assert listdir(tmp_path) == ["out.parquet"]


def test_os_error_while_writing_is_data_error(tmp_path):
    out = str(tmp_path / "r.json")
    with pytest.raises(DataError) as info, dio.atomic_output(out) as fh:
        fh.write(b"partial")
        raise OSError(28, "No space left on device")
    assert out in str(info.value) and "No space left" in str(info.value)
    assert listdir(tmp_path) == []


def test_atomic_write_bytes(tmp_path):
    out = tmp_path / "report.json"
    dio.atomic_write_bytes(str(out), '{"eps": 1}')
    dio.atomic_write_bytes(str(out), b'{"eps": 2}')
    assert out.read_text() == '{"eps": 2}'
    assert listdir(tmp_path) == ["report.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


def test_move_file_across_file_systems(tmp_path, monkeypatch):
    """online-replay publishes a staged release from the state directory, which may be on
    another file system than --out-dir: then it is copied beside the target (umask mode),
    renamed over it, and the staged file removed."""
    import errno

    (tmp_path / "stage").mkdir(mode=0o700)
    src, dst = tmp_path / "stage" / "r.parquet", tmp_path / "r.parquet"
    src.write_bytes(b"release")
    src.chmod(0o600)
    real = os.replace

    def no_rename_across(a, b):
        if str(a) == str(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(a, b)

    monkeypatch.setattr(atomic.os, "replace", no_rename_across)
    dio.move_file(str(src), str(dst))
    mask = os.umask(0)
    os.umask(mask)
    assert dst.read_bytes() == b"release" and dst.stat().st_mode & 0o777 == 0o666 & ~mask
    assert not src.exists() and listdir(tmp_path) == ["r.parquet", "stage"]


def test_missing_output_directory(tmp_path):
    out = str(tmp_path / "no" / "such" / "out.csv")
    msg = error_of(UsageError, dio.write_table, sample_table(), out, "csv", input_path=None)
    assert out in msg
    assert not (tmp_path / "no").exists()


def test_output_is_a_directory(tmp_path):
    out = str(tmp_path)
    msg = error_of(UsageError, dio.write_table, sample_table(), out, "csv", input_path=None)
    assert str(tmp_path) in msg


def test_refuse_to_overwrite_input(tmp_path, monkeypatch):
    src = tmp_path / "data.csv"
    original = ("a,b\n" + secret_rows()).encode()
    src.write_bytes(original)
    link = tmp_path / "link.csv"
    link.symlink_to(src)
    hard = tmp_path / "hard.csv"
    os.link(src, hard)
    monkeypatch.chdir(tmp_path)
    for out, inp in [
        (str(src), str(src)),
        ("data.csv", str(src)),
        ("./sub/../data.csv", "data.csv"),
        (str(link), str(src)),
        (str(src), str(link)),
        (str(hard), str(src)),
    ]:
        if "sub" in out:
            (tmp_path / "sub").mkdir(exist_ok=True)
        msg = error_of(UsageError, dio.write_table, sample_table(), out, "csv", input_path=inp)
        assert "input" in msg
        assert src.read_bytes() == original
    dio.write_table(sample_table(), "other.csv", "csv", input_path=str(src))
    assert src.read_bytes() == original


def test_write_outputs_with_report(tmp_path):
    out, rep = tmp_path / "s.csv", tmp_path / "s.csv.report.json"
    dio.write_outputs(
        sample_table(), str(out), "csv", input_path=None, extra={str(rep): '{"ok": true}'}
    )
    assert rep.read_text() == '{"ok": true}'
    assert dio.read_table(str(out), "csv", None).num_rows == 50
    assert listdir(tmp_path) == ["s.csv", "s.csv.report.json"]


def test_write_outputs_refusals_write_nothing(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("a\n1\n")
    out = str(tmp_path / "o.csv")
    msg = error_of(
        UsageError,
        dio.write_outputs,
        sample_table(),
        out,
        "csv",
        input_path=str(src),
        extra={str(src): "{}"},
    )
    assert str(src) in msg
    error_of(
        UsageError,
        dio.write_outputs,
        sample_table(),
        out,
        "csv",
        input_path=None,
        extra={out: "{}"},
    )
    error_of(
        UsageError,
        dio.write_outputs,
        sample_table(),
        out,
        "csv",
        input_path=None,
        extra={str(tmp_path / "missing" / "r.json"): "{}"},
    )
    assert listdir(tmp_path) == ["in.csv"]


def test_write_outputs_failure_commits_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("fail")

    monkeypatch.setattr(serialise.pacsv, "write_csv", boom)
    with pytest.raises(RuntimeError):
        dio.write_outputs(
            sample_table(),
            str(tmp_path / "o.csv"),
            "csv",
            input_path=None,
            extra={str(tmp_path / "r.json"): "{}"},
        )
    assert listdir(tmp_path) == []


# --------------------------------------------------------------------------- stdout


class FakeStdout:
    def __init__(self, buffer):
        self.buffer = buffer

    def flush(self):
        pass

    def fileno(self):
        return self.buffer.fileno()


def test_write_csv_to_stdout(monkeypatch):
    sink = pyio.BytesIO()
    monkeypatch.setattr(sys, "stdout", FakeStdout(sink))
    monkeypatch.setattr(serialise, "CSV_CHUNK_ROWS", 7)
    table = sample_table(20)
    dio.write_table(table, "-", "csv", input_path="-")
    back = pacsv.read_csv(pa.py_buffer(sink.getvalue()))
    assert back.num_rows == 20 and back.column("age").to_pylist() == table["age"].to_pylist()
    assert sink.getvalue().count(b"age") == 1  # one header


def test_write_to_closed_pipe_raises_output_closed(monkeypatch):
    read_end, write_end = os.pipe()
    os.close(read_end)
    pipe = open(write_end, "wb", buffering=0)  # noqa: SIM115
    try:
        monkeypatch.setattr(sys, "stdout", FakeStdout(pipe))
        with pytest.raises(dio.OutputClosed):
            dio.write_table(sample_table(), "-", "csv", input_path=None)
        assert os.write(write_end, b"x") == 1  # the descriptor now points at /dev/null
    finally:
        pipe.close()


def test_closed_pipe_in_subprocess_is_quiet():
    script = textwrap.dedent(
        """
        import sys
        import numpy as np, pyarrow as pa
        from dpsynth_cli import io as dio
        table = pa.table({"x": np.arange(300_000), "y": np.arange(300_000) * 0.5})
        try:
            dio.write_table(table, "-", "csv", input_path=None)
        except dio.OutputClosed:
            print("more text, flushed at exit")  # must not fail: stdout now goes to /dev/null
            sys.exit(42)
        """
    )
    code, head, stderr = closing_stdout_early(script, timeout=30)
    assert code == 42
    assert head.startswith(b'"x","y"')
    assert stderr == b""


def closing_stdout_early(script: str, timeout: float) -> tuple[int, bytes, bytes]:
    """Run `script` in a fresh Python, read 10 bytes of its stdout, then close the pipe (as
    `| head` does): its exit code, those bytes, and its stderr."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(dpsynth_cli.__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    head = proc.stdout.read(10)
    proc.stdout.close()
    stderr = proc.stderr.read()
    proc.stderr.close()
    return proc.wait(timeout=timeout), head, stderr
