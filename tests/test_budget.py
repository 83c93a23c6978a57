"""The privacy budget across runs (issue 26): refusal before reading, concurrency, crashes,
growing tables, streams counted once, and nothing of the private file in public outputs."""

from __future__ import annotations

import json
import multiprocessing
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth_cli import budget, io
from dpsynth_cli.budget import BudgetFile, dataset_for
from dpsynth_cli.cli import app
from dpsynth_cli.errors import PrivacyRefusal, UsageError

BOUNDS = ["--bounds", "age=0:100", "--bounds", "score=0:1"]


def invoke(runner, *args):
    return runner.invoke(app, [*map(str, args)])


def synth(runner, data, out, eps=1, *extra):
    return invoke(runner, "synth", data, "--eps", eps, *BOUNDS, "-o", out, "-q", *extra)


def releases(path: Path) -> list[dict]:
    raw = json.loads(path.read_text())
    return [r for entry in raw["datasets"].values() for r in entry["releases"]]


def test_a_run_past_the_total_is_refused_before_the_input_is_read(
    runner, small_csv, tmp_path, private_budget, monkeypatch
):
    assert invoke(runner, "budget", "set", "--input", small_csv, "--eps", 1.5).exit_code == 0
    first = synth(runner, small_csv, tmp_path / "a.csv")
    assert first.exit_code == 0, first.output

    def no_reading(*_args, **_kwargs):
        raise AssertionError("the input was opened")

    monkeypatch.setattr(io, "open_input", no_reading)
    second = synth(runner, small_csv, tmp_path / "b.csv")
    assert second.exit_code == 3, second.output
    line = second.stderr.strip()
    assert line.startswith("dpsynth: error: privacy budget of dataset") and "\n" not in line
    when = releases(private_budget)[0]["time"]
    assert "spent eps 1 of its total eps 1.5" in line and f"synth eps 1 at {when}" in line
    assert not (tmp_path / "b.csv").exists() and not (tmp_path / "b.csv.report.json").exists()
    assert len(releases(private_budget)) == 1  # the refused run spent nothing
    for command in (
        ["pca", small_csv, "--eps", 1, *BOUNDS, "-o", tmp_path / "p.csv"],
        ["online-replay", small_csv, "--eps", 1, *BOUNDS, "--out-dir", tmp_path / "r"],
    ):
        refused = invoke(runner, *command)
        assert refused.exit_code == 3, refused.output
        assert "refused, nothing read or written" in refused.stderr
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "a.csv.report.json", "small.csv"]


def test_dry_run_and_refused_usage_spend_nothing(runner, small_csv, tmp_path, private_budget):
    dry = invoke(runner, "synth", small_csv, "--eps", 1, *BOUNDS, "--dry-run")
    assert dry.exit_code == 0
    bad = invoke(runner, "synth", small_csv, "--eps", 1, "--columns", "nope", "-o", tmp_path / "o")
    assert bad.exit_code == 2
    assert not private_budget.exists() or releases(private_budget) == []


def _charge(args: tuple[str, int]) -> bool:
    path, i = args
    try:
        return BudgetFile(path).charge(dataset_for(None, "shared"), f"run{i}", 0.5)
    except PrivacyRefusal:
        return False


def test_concurrent_runs_never_both_spend_the_last_of_a_budget(tmp_path):
    path = str(tmp_path / "budget.json")
    BudgetFile(path).set_total(dataset_for(None, "shared"), 2)
    with multiprocessing.get_context("fork").Pool(8) as pool:
        done = pool.map(_charge, [(path, i) for i in range(16)])
    assert sum(done) == 4  # 4 x 0.5 = 2: exactly the total, never more
    assert len(releases(Path(path))) == 4


def test_two_concurrent_commands_one_is_refused(small_csv, tmp_path):
    """Two synth processes started together against a total that only one of them fits."""
    path = tmp_path / "b.json"
    env = {**os.environ, "DPSYNTH_BUDGET": str(path)}
    run = [sys.executable, "-m", "dpsynth_cli"]
    setup = [*run, "budget", "set", "--input", str(small_csv), "--eps", "1"]
    subprocess.run(setup, env=env, check=True, capture_output=True)
    procs = [
        subprocess.Popen(
            [
                *run,
                "synth",
                str(small_csv),
                "--eps",
                "0.6",
                *BOUNDS,
                "-o",
                str(tmp_path / f"{i}.csv"),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    codes = sorted(p.wait(timeout=300) for p in procs)
    assert codes == [0, 3], [p.stderr.read() for p in procs]
    assert len(releases(path)) == 1


def test_a_crash_after_the_spend_keeps_it(runner, small_csv, tmp_path, private_budget, monkeypatch):
    """The spend is on disk before any row is read: a run that dies later keeps it."""
    from dpsynth_cli import cli

    def crash(*_args, **_kwargs):
        raise KeyboardInterrupt  # Ctrl-C (or a crash) between the spend and the release

    monkeypatch.setattr(cli, "synthesize", crash)
    result = synth(runner, small_csv, tmp_path / "o.csv")
    assert result.exit_code == 130
    assert not (tmp_path / "o.csv").exists()
    assert [r["command"] for r in releases(private_budget)] == ["synth"]


def test_a_killed_run_keeps_its_spend(small_csv, tmp_path):
    """SIGKILL at the first row read: no output, the spend recorded."""
    path = tmp_path / "b.json"
    code = (
        "import os, signal, sys\n"
        "from dpsynth_cli import synth, cli\n"
        "def killed(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "cli.synthesize = killed\n"
        "sys.argv = ['dpsynth'] + sys.argv[1:]\n"
        "cli.main()\n"
    )
    args = ["synth", str(small_csv), "--eps", "0.5", *BOUNDS, "-o", str(tmp_path / "o.csv")]
    env = {**os.environ, "DPSYNTH_BUDGET": str(path)}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True)
    assert done.returncode == -9
    assert not (tmp_path / "o.csv").exists()
    assert [r["epsilon"] for r in releases(path)] == ["1/2"]


def test_a_growing_table_keeps_its_budget(runner, small_csv, tmp_path, private_budget):
    assert invoke(runner, "budget", "set", "--input", small_csv, "--eps", 1.5).exit_code == 0
    assert synth(runner, small_csv, tmp_path / "a.csv").exit_code == 0
    frame = pd.read_csv(small_csv)
    pd.concat([frame, frame.head(100)]).to_csv(small_csv, index=False)  # rows appended
    refused = synth(runner, small_csv, tmp_path / "b.csv")
    assert refused.exit_code == 3 and "spent eps 1" in refused.stderr
    other_schema = invoke(
        runner, "synth", small_csv, "--eps", 1, "--bounds", "age=0:120", "-o", tmp_path / "c.csv"
    )
    assert other_schema.exit_code == 3  # other columns or bounds: the same people


def test_a_dataset_name_holds_across_paths(runner, small_csv, tmp_path, private_budget):
    copy = tmp_path / "moved.csv"
    copy.write_bytes(small_csv.read_bytes())
    assert invoke(runner, "budget", "set", "sales", "--eps", 1).exit_code == 0
    assert synth(runner, small_csv, tmp_path / "a.csv", 0.6, "--dataset", "sales").exit_code == 0
    refused = synth(runner, copy, tmp_path / "b.csv", 0.6, "--dataset", "sales")
    assert refused.exit_code == 3 and "dataset 'sales'" in refused.stderr
    shown = json.loads(invoke(runner, "budget", "show", "sales", "--json").stdout)
    assert shown["datasets"][0]["spent_epsilon"] == 0.6


def test_decimal_spends_add_up_exactly(tmp_path):
    """Ten runs of eps 0.1 fit a total of 1 (as decimals, not as the nearest doubles)."""
    file, data = BudgetFile(str(tmp_path / "b.json")), dataset_for(None, "d")
    file.set_total(data, 1)
    for _ in range(10):
        file.charge(data, "synth", 0.1)
    with pytest.raises(PrivacyRefusal, match=r"spent eps 1 of its total eps 1 "):
        file.charge(data, "synth", 0.1)


def test_a_continued_stream_is_charged_once(runner, tmp_path, private_budget):
    rng = np.random.default_rng(3)
    stream = tmp_path / "s.csv"
    pd.DataFrame({"t": np.arange(300), "x": rng.random(300)}).to_csv(stream, index=False)
    args = ["online-replay", stream, "--eps", 1, "--bounds", "x=0:1", "--order-by", "t"]
    args += ["--checkpoints", "every:100", "-q"]
    state = ["--state", tmp_path / "state"]
    for _ in range(3):
        done = invoke(runner, *args, "--out-dir", tmp_path / "out", *state)
        assert done.exit_code == 0, done.output
    assert len(releases(private_budget)) == 1  # one stream: its eps once
    again = invoke(runner, *args, "--out-dir", tmp_path / "out2")  # no state: a new stream
    assert again.exit_code == 0, again.output
    assert [r["command"] for r in releases(private_budget)] == ["online-replay"] * 2
    assert invoke(runner, "budget", "set", "--input", stream, "--eps", 2).exit_code == 0
    resumed = invoke(runner, *args, "--out-dir", tmp_path / "out", *state)
    assert resumed.exit_code == 0, resumed.output  # at the total, a continued stream costs 0


def test_the_budget_file_is_private_and_stays_out_of_public_outputs(
    runner, small_csv, tmp_path, monkeypatch
):
    state = tmp_path / "xdg"
    monkeypatch.delenv("DPSYNTH_BUDGET")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    out = tmp_path / "o.csv"
    monkeypatch.chdir(tmp_path)
    result = invoke(
        runner, "synth", small_csv, "--eps", 1, *BOUNDS, "-o", "-", "--report", "r.json"
    )
    assert result.exit_code == 0, result.output
    path = state / "dpsynth" / "budget.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    monkeypatch.setattr(sys, "argv", ["dpsynth", "synth", "--budget", str(path)])  # as typed
    assert synth(runner, small_csv, out, 1, "--budget", path).exit_code == 0
    (key,) = json.loads(path.read_text())["datasets"]
    public = result.stdout + out.read_text() + (tmp_path / "o.csv.report.json").read_text()
    public += (tmp_path / "r.json").read_text()
    assert '"--budget",\n    "(private)"' in public
    for secret in (key, key.split(":")[1], str(path), "budget.json", str(state)):
        assert secret not in public


def test_default_location_and_opting_out(tmp_path, monkeypatch, runner, small_csv):
    monkeypatch.delenv("DPSYNTH_BUDGET")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert budget.default_path() == str(tmp_path / "home/.local/state/dpsynth/budget.json")
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # ignored, as the XDG spec says
    assert budget.resolve_path(None) == budget.default_path()
    monkeypatch.setenv("DPSYNTH_BUDGET", "off")
    assert budget.resolve_path(None) is None
    monkeypatch.delenv("DPSYNTH_BUDGET")
    assert synth(runner, small_csv, tmp_path / "o.csv", 1, "--no-budget").exit_code == 0
    assert not (tmp_path / "home").exists()
    both = synth(runner, small_csv, tmp_path / "p.csv", 1, "--no-budget", "--budget", "x.json")
    assert both.exit_code == 2


def test_a_damaged_budget_file_refuses(runner, small_csv, tmp_path, private_budget):
    private_budget.write_text("{not json")
    result = synth(runner, small_csv, tmp_path / "o.csv")
    assert result.exit_code == 3 and "is unreadable" in result.stderr
    assert not (tmp_path / "o.csv").exists()


def test_budget_show_set_reset(runner, small_csv, tmp_path, private_budget):
    assert synth(runner, small_csv, tmp_path / "o.csv", 0.5).exit_code == 0
    shown = invoke(runner, "budget", "show")
    assert shown.exit_code == 0 and "spent eps 0.5 (no total set), 1 releases" in shown.stdout
    assert invoke(runner, "budget", "set", "--input", small_csv, "--eps", 0.4).exit_code == 0
    assert synth(runner, small_csv, tmp_path / "p.csv", 0.1).exit_code == 3  # below what is spent
    reset = invoke(runner, "budget", "reset", "--input", small_csv)
    assert reset.exit_code == 0 and "forgot 1 releases" in reset.stdout
    assert synth(runner, small_csv, tmp_path / "p.csv", 0.1).exit_code == 0
    assert invoke(runner, "budget", "set", "--eps", 1).exit_code == 2  # which dataset?


def test_deltas_add_up_against_their_own_total(tmp_path):
    file, data = BudgetFile(str(tmp_path / "b.json")), dataset_for(None, "d")
    file.set_total(data, 3)  # no --delta: a total delta of 0
    with pytest.raises(PrivacyRefusal, match="needs eps 1 delta 1e-06"):
        file.charge(data, "pca", 1, 1e-6)
    file.set_total(data, 3, 1e-6)
    file.charge(data, "pca", 1, 1e-6)
    with pytest.raises(PrivacyRefusal, match="spent eps 1 delta 1e-06 of its total eps 3 delta"):
        file.charge(data, "pca", 1, 1e-7)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(UsageError):
            file.charge(data, "pca", 1, bad)  # a negative spend would refund the budget


def test_a_stream_fed_new_files_is_charged_once_per_file(runner, tmp_path, private_budget):
    """--input-mode new reads another file each run: the stream's eps is recorded once under
    each file it reads (the same stream id), and a file read again costs nothing more."""
    rng = np.random.default_rng(5)
    args = ["--eps", 1, "--bounds", "x=0:1", "--checkpoints", "every:100", "--input-mode", "new"]
    args += ["--state", tmp_path / "state", "--out-dir", tmp_path / "out", "-q"]
    for day in (0, 1, 1):
        part = tmp_path / f"day{day}.csv"
        pd.DataFrame({"x": rng.random(150)}).to_csv(part, index=False)
        done = invoke(runner, "online-replay", part, *args)
        assert done.exit_code == 0, done.output
    raw = json.loads(private_budget.read_text())["datasets"]
    assert sorted(Path(e["label"]).name for e in raw.values()) == ["day0.csv", "day1.csv"]
    assert all(len(e["releases"]) == 1 for e in raw.values())
    assert len({r["stream"] for r in releases(private_budget)}) == 1


def dpsynth(*args, stdin=None, timeout=300, shell=False) -> subprocess.CompletedProcess:
    """The real command, `python -m dpsynth_cli ARGS`, in a process of its own (the budget file
    of the test through $DPSYNTH_BUDGET)."""
    command = [sys.executable, "-m", "dpsynth_cli", *map(str, args)]
    if shell:  # bash, for process substitution: ARGS are bash words
        words = (a if a.startswith("<(") else shlex.quote(a) for a in command)
        command = ["bash", "-c", " ".join(words)]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_continued_stream_is_refused_by_the_total_of_the_data_it_reads(tmp_path, private_budget):
    """Finding 3: `online-replay A --state S`, then `online-replay B --state S --input-mode new`
    released B's rows although B's total was spent: a continuation is charged to, and refused
    by, the total of the dataset it reads."""
    rng = np.random.default_rng(8)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for path in (a, b):
        pd.DataFrame({"x": rng.random(150)}).to_csv(path, index=False)
    args = ["--eps", 2, "--bounds", "x=0:1", "--checkpoints", "every:100", "--input-mode", "new"]
    args += ["--state", tmp_path / "state", "-q"]
    assert dpsynth("budget", "set", "--input", b, "--eps", 1).returncode == 0
    first = dpsynth("online-replay", a, *args, "--out-dir", tmp_path / "out")
    assert first.returncode == 0, first.stderr
    refused = dpsynth("online-replay", b, *args, "--out-dir", tmp_path / "out2")
    assert refused.returncode == 3, refused.stderr
    assert "privacy budget of dataset" in refused.stderr and str(b) in refused.stderr
    assert not (tmp_path / "out2").exists()
    named = dpsynth("online-replay", a, *args, "--out-dir", tmp_path / "out3", "--dataset", "b")
    assert named.returncode == 0, named.stderr  # another --dataset: charged there (no total)
    assert dpsynth("budget", "set", "--input", b, "--eps", 3).returncode == 0
    for out in ("out4", "out5"):  # charged once under b, then free there
        done = dpsynth("online-replay", b, *args, "--out-dir", tmp_path / out)
        assert done.returncode == 0, done.stderr
    raw = json.loads(private_budget.read_text())["datasets"]
    labels = {Path(e["label"]).name: e["releases"] for e in raw.values()}
    assert sorted(labels) == ["a.csv", "b", "b.csv"]
    assert [len(r) for r in labels.values()] == [1, 1, 1]
    assert len({r["stream"] for r in releases(private_budget)}) == 1
    assert dpsynth("budget", "set", "b", "--eps", 1).returncode == 0  # spent 2 of 1
    again = dpsynth("online-replay", a, *args, "--out-dir", tmp_path / "out6", "--dataset", "b")
    assert again.returncode == 0, again.stderr  # recorded under "b": a continuation is free


def test_pipes_and_devices_are_the_stdin_dataset(small_csv, tmp_path, private_budget):
    """Finding 4: /dev/stdin, /proc/self/fd/0 and bash's <(...) resolve to a pipe's path, unique
    to each run, so each was a new dataset and stepped round stdin's total. Every input that is
    neither a regular file nor a directory is the stdin dataset."""
    table = small_csv.read_text()
    args = ["--input-format", "csv", "--eps", 0.5, *BOUNDS, "-q"]
    substituted = dpsynth(
        "synth", f"<(cat {small_csv})", *args, "-o", tmp_path / "a.csv", shell=True
    )
    assert substituted.returncode == 0, substituted.stderr
    (entry,) = json.loads(private_budget.read_text())["datasets"].items()
    assert entry[0] == "stdin" and entry[1]["label"] == "(stdin)"  # charged to stdin
    assert dpsynth("budget", "set", "--input", "-", "--eps", 1).returncode == 0
    piped = dpsynth("synth", "-", *args, "-o", tmp_path / "b.csv", stdin=table)
    assert piped.returncode == 0, piped.stderr  # stdin: 1 of 1 spent
    for path in ("/dev/stdin", "/proc/self/fd/0"):
        refused = dpsynth("synth", path, *args, "-o", tmp_path / "c.csv", stdin=table)
        assert refused.returncode == 3, refused.stderr
        assert "privacy budget of dataset '(stdin)' exceeded" in refused.stderr
    again = dpsynth("synth", f"<(cat {small_csv})", *args, "-o", tmp_path / "c.csv", shell=True)
    assert again.returncode == 3 and "'(stdin)'" in again.stderr
    assert not (tmp_path / "c.csv").exists()
    assert budget.dataset_for("/dev/null").key == "stdin"  # a device: no file to name
    assert budget.dataset_for(str(small_csv)).label == str(small_csv.resolve())
    assert budget.dataset_for(str(tmp_path)).label == str(tmp_path.resolve())  # a directory
    missing = str(tmp_path / "missing.csv")
    assert budget.dataset_for(missing).label == missing  # fails later, when it is opened


def spent(path: Path) -> list[dict]:
    return releases(path) if path.exists() else []


def test_usage_errors_of_flags_and_declarations_spend_nothing_and_open_nothing(
    tmp_path, private_budget
):
    """Finding 5: --mechanism marginals on more than 100 columns was refused after the spend
    and a full read. Every usage error that the flags and declarations decide comes before the
    input is opened: the input here is a FIFO that nobody writes (opening it would hang)."""
    fifo = tmp_path / "wide.csv"
    os.mkfifo(fifo)
    names = [f"c{j}" for j in range(101)]
    schema = tmp_path / "wide.json"
    columns = {n: {"type": "float", "lower": 0, "upper": 1} for n in names}
    schema.write_text(json.dumps({"columns": columns}))
    synth_args = ["synth", fifo, "--eps", 1, "-o", tmp_path / "o.csv", "-q"]
    wide = dpsynth(*synth_args, "--schema", schema, "--mechanism", "marginals", timeout=120)
    assert wide.returncode == 2, wide.stderr
    assert "--mechanism marginals takes at most 100 columns (101 chosen)" in wide.stderr
    narrow = dpsynth(*synth_args, "--bounds", "a=0:1", "--bounds", "b=0:1", "--dim", 3)
    assert narrow.returncode == 2 and "--dim 3: must be between 1" in narrow.stderr
    pca = dpsynth("pca", fifo, "--eps", 1, "--bounds", "a=0:1", "-k", 2, "-o", tmp_path / "p.csv")
    assert pca.returncode == 2 and "-k must be between 1" in pca.stderr
    replay = ["online-replay", fifo, "--eps", 1, "--bounds", "a=0:1", "--out-dir", tmp_path / "r"]
    at_end = dpsynth(*replay, "--release-at-end")
    assert at_end.returncode == 2 and "--row-counts-public" in at_end.stderr
    assert spent(private_budget) == [] and not (tmp_path / "o.csv").exists()


def test_usage_errors_the_header_decides_come_before_the_spend(small_csv, tmp_path, private_budget):
    """The columns of a Parquet file without declared types, or a constraint or --dim against
    a column's declared kind: the usage error comes after the header is read and before the
    spend (it came after the spend)."""
    rng = np.random.default_rng(1)
    wide = tmp_path / "wide.parquet"
    pd.DataFrame(rng.random((50, 101)), columns=[f"c{j}" for j in range(101)]).to_parquet(wide)
    out = ["-o", tmp_path / "o.csv", "-q"]
    marginals = dpsynth("synth", wide, "--eps", 1, "--mechanism", "marginals", *out)
    assert marginals.returncode == 2, marginals.stderr
    assert "at most 100 columns (101 chosen)" in marginals.stderr
    schema = tmp_path / "s.json"
    columns = {
        "age": {"type": "integer", "lower": 0, "upper": 100},
        "name": {"type": "category", "levels": ["r", "s"]},
    }
    schema.write_text(json.dumps({"columns": columns}))
    mixed = dpsynth("synth", small_csv, "--eps", 1, "--schema", schema, "--dim", 1, *out)
    assert mixed.returncode == 2 and "--dim 1:" in mixed.stderr, mixed.stderr
    integer = ["--integer", "age", "--bounds", "age=0.2:0.8", "--bounds", "score=0:1"]
    no_integer = dpsynth("synth", small_csv, "--eps", 1, *integer, *out)
    assert no_integer.returncode == 2 and "contain no integer" in no_integer.stderr
    assert spent(private_budget) == [] and not (tmp_path / "o.csv").exists()


def test_the_api_refuses_usage_errors_before_the_spend(tmp_path, private_budget):
    import dpsynth_cli as dp

    frame = pd.DataFrame(np.random.default_rng(2).random((40, 101)))
    frame.columns = [f"c{j}" for j in range(101)]
    bounds = {c: (0.0, 1.0) for c in frame.columns}
    with pytest.raises(UsageError, match="at most 100 columns"):
        dp.synthesize(frame, eps=1, bounds=bounds, mechanism="marginals", dataset="wide")
    with pytest.raises(UsageError, match="at most 100 columns"):  # a path: never opened
        dp.synthesize(tmp_path / "missing.csv", eps=1, bounds=bounds, mechanism="marginals")
    assert spent(private_budget) == []


def test_a_continuation_refused_by_its_state_spends_nothing(tmp_path, private_budget):
    """A state made with other flags refuses a continuation (exit 3) before the spend, also
    one that reads another dataset (which would be charged there)."""
    rng = np.random.default_rng(4)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for path in (a, b):
        pd.DataFrame({"x": rng.random(150)}).to_csv(path, index=False)
    args = ["--bounds", "x=0:1", "--checkpoints", "every:100", "--state", tmp_path / "state"]
    args += ["--out-dir", tmp_path / "out", "-q"]
    new = ["--input-mode", "new"]
    assert dpsynth("online-replay", a, "--eps", 1, *args, *new).returncode == 0
    other = dpsynth("online-replay", b, "--eps", 2, *args, *new)
    assert other.returncode == 3 and "it was made with --eps 1" in other.stderr
    whole = dpsynth("online-replay", b, "--eps", 1, *args)  # --input-mode whole after new
    assert whole.returncode == 3 and "--input-mode new: keep using it" in whole.stderr
    labels = [e["label"] for e in json.loads(private_budget.read_text())["datasets"].values()]
    assert labels == [str(a.resolve())]  # b: nothing spent
