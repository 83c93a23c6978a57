"""One privacy budget across runs: a private file recording every release, per dataset.

Every run of `synth`, `pca` and `online-replay` spends its --eps (and --delta) on its input
again. This file (`--budget FILE`, else $DPSYNTH_BUDGET, else `default_path()`) records each
release: the dataset it read, the command, epsilon, delta and the time. A total declared with
`dpsynth budget set` is enforced: a run whose spend would take the dataset past it is refused
(PrivacyRefusal, exit 3) before its input is opened.

What "the same data" is (`dataset_for`): the name given with --dataset NAME, else the input's
resolved path (symlinks followed). Neither depends on the rows, so a table that grows keeps its
budget; neither depends on the columns or the schema either, since the budget protects the
people in the rows, whichever columns a run reads (a schema change must not reset it). A moved
or renamed file is a new path: name the data with --dataset to keep one budget across paths.
Everything read from stdin shares the dataset "stdin" (conservative), and so does every input
that is neither a regular file nor a directory (checked with stat, symlinks followed):
/dev/stdin, /proc/self/fd/N, a FIFO, bash's <(...), a device. Their resolved paths (a pipe's
is unique to each run) name no data, so each run would start a new budget. Every in-memory
table given to the Python API without `dataset=` shares the dataset "memory".

Composition is basic: the spends of a dataset add up (epsilons and deltas separately), which
holds for any mix of pure and (eps, delta) releases. A stream continued with --state counts
once per dataset: its eps is recorded (with the stream's id) under the dataset its first run
reads, and a run that continues the state costs nothing only under a dataset where the stream
is recorded already. A continuation that reads another dataset (--input-mode new with another
file, another --dataset) records the stream's eps under that dataset too, and is refused past
that dataset's total like any run (`charge(stream=..., resumed=True)`): the stream's releases
are eps-DP for the people of every dataset it reads, so each of them pays eps once.

Order and safety: the spend is written (fsynced) before the run reads a row, so a crash or a
failure later never loses it; the spend of a run that fails after that point is kept (the
noise may have been drawn; the conservative choice). Two runs at once (cron) serialise on an
flock of FILE.lock; each re-reads the file under the lock, so two runs never both spend the
last of a total. The file is replaced atomically (temporary file, fsync, rename) and is
owner-only (0600, its directory 0700 when dpsynth creates it): it names the inputs and when
they were used. Nothing of it goes into a report, an output file or stdout of a release.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from dpsynth_cli.errors import PrivacyRefusal, UsageError
from dpsynth_cli.io import fsync_dir

ENV = "DPSYNTH_BUDGET"
OFF = ("off", "none")  # DPSYNTH_BUDGET=off: no budget file (like --no-budget)
FORMAT = "dpsynth.budget/1"
FILE_NAME = "budget.json"


def default_path() -> str:
    """$XDG_STATE_HOME/dpsynth/budget.json, else ~/.local/state/dpsynth/budget.json."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "dpsynth", FILE_NAME)


def resolve_path(flag: str | None, off: bool = False) -> str | None:
    """The budget file of a run: --budget, else $DPSYNTH_BUDGET, else the default; None when
    switched off (--no-budget, or DPSYNTH_BUDGET=off)."""
    if off and flag:
        raise UsageError("--budget and --no-budget: give one of them")
    if off:
        return None
    env = os.environ.get(ENV, "").strip()
    if not flag and env.lower() in OFF:
        return None
    return flag or env or default_path()


@dataclass(frozen=True)
class Dataset:
    """What a budget is kept for: `key` (a fingerprint, in the budget file only) and `label`
    (what `dpsynth budget show` prints)."""

    key: str
    label: str


def dataset_for(input: str | None, name: str | None = None) -> Dataset:
    """--dataset NAME, else the input's resolved path ("-", and any input that is neither a
    regular file nor a directory: stdin; None: an in-memory table)."""
    if name is not None:
        name = name.strip()
        if not name or not name.isprintable():
            raise UsageError("--dataset needs a name of printable characters, e.g. --dataset sales")
        return Dataset(f"name:{name}", name)
    if input is None:
        return Dataset("memory", "(in-memory tables without a dataset name)")
    if input == "-" or not _file_or_directory(input):
        return Dataset("stdin", "(stdin)")
    path = os.path.realpath(input)
    return Dataset("file:" + hashlib.sha256(path.encode("utf-8")).hexdigest(), path)


def _file_or_directory(path: str) -> bool:
    """Whether `path` is a regular file or a directory (symlinks followed: /dev/stdin is the
    pipe or terminal it points to). A path that cannot be looked at (missing, no permission)
    counts as one: its run fails when it opens the input, after the check and before a spend."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return True
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def stream_id(state_dir: str) -> str:
    """The fingerprint of an online stream: its --state directory."""
    return hashlib.sha256(os.path.realpath(state_dir).encode("utf-8")).hexdigest()


def _exact(x: float, flag: str) -> Fraction:
    """A flag's value as the decimal the user wrote (0.1 is 1/10, not the nearest double); a
    negative, infinite or NaN one is a usage error (a negative spend would refund budget)."""
    if not math.isfinite(x) or x < 0:
        raise UsageError(f"{flag} must be a finite number >= 0")
    return Fraction(repr(float(x)))


def _text(x: Fraction) -> str:
    return f"{float(x):.6g}"


@dataclass
class Entry:
    """One dataset's record: its declared total (None: not set) and its releases."""

    label: str
    total_epsilon: Fraction | None
    total_delta: Fraction | None
    releases: list[dict[str, Any]]

    @property
    def spent(self) -> tuple[Fraction, Fraction]:
        eps = sum((Fraction(r["epsilon"]) for r in self.releases), Fraction(0))
        return eps, sum((Fraction(r["delta"]) for r in self.releases), Fraction(0))

    def to_json(self) -> dict[str, Any]:
        total = None
        if self.total_epsilon is not None:
            total = {"epsilon": str(self.total_epsilon), "delta": str(self.total_delta or 0)}
        return {"label": self.label, "total": total, "releases": self.releases}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Entry:
        total = raw.get("total")
        return cls(
            raw["label"],
            None if total is None else Fraction(total["epsilon"]),
            None if total is None else Fraction(total["delta"]),
            list(raw["releases"]),
        )

    def summary(self) -> dict[str, Any]:
        """What `dpsynth budget show --json` prints for it."""
        eps, delta = self.spent
        return {
            "dataset": self.label,
            "total_epsilon": None if self.total_epsilon is None else float(self.total_epsilon),
            "total_delta": None if self.total_delta is None else float(self.total_delta),
            "spent_epsilon": float(eps),
            "spent_delta": float(delta),
            "releases": [
                {
                    **r,
                    "epsilon": float(Fraction(r["epsilon"])),
                    "delta": float(Fraction(r["delta"])),
                }
                for r in self.releases
            ],
        }


class BudgetFile:
    """The budget file at `path`: read and changed only under its lock (FILE.lock)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(os.path.expanduser(path))

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Entry]]:
        """The datasets, under an exclusive lock; changes to them are written when the block
        ends without an error (atomically, owner-only)."""
        directory = os.path.dirname(self.path)
        try:
            if not os.path.isdir(directory):
                os.makedirs(directory, mode=0o700, exist_ok=True)
                os.chmod(directory, 0o700)
            fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise PrivacyRefusal(f"cannot use budget file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # other runs wait: the lock is held for milliseconds
            entries = self._read()
            before = json.dumps(self._json(entries))
            yield entries
            if json.dumps(self._json(entries)) != before:
                self._write(json.dumps(self._json(entries), indent=1).encode("utf-8") + b"\n")
        finally:
            os.close(fd)

    def _write(self, data: bytes) -> None:
        """Replace the file atomically: a temporary file (0600) beside it, fsynced, renamed
        over it, the directory fsynced. A crash leaves the old file or the new one."""
        directory = os.path.dirname(self.path)
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".budget.", suffix=".tmp")
        except OSError as exc:
            raise PrivacyRefusal(f"cannot write budget file {self.path}: {exc.strerror}") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), 0o600)
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, self.path)  # an atomic replace on POSIX
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise PrivacyRefusal(
                    f"cannot write budget file {self.path}: {exc.strerror}"
                ) from None
            raise
        fsync_dir(directory)

    def read(self) -> dict[str, Entry]:
        """The datasets as they are now (under the lock, unchanged)."""
        with self.locked() as entries:
            return entries

    def _read(self) -> dict[str, Entry]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                raw = json.load(fh)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise PrivacyRefusal(
                f"budget file {self.path} is unreadable ({type(exc).__name__}): what was spent "
                "is unknown, so nothing is released; repair or move it"
            ) from None
        try:
            if raw.get("format") != FORMAT:
                raise KeyError("format")
            return {k: Entry.from_json(v) for k, v in raw["datasets"].items()}
        except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError):
            raise PrivacyRefusal(
                f"budget file {self.path} is not a dpsynth budget file ({FORMAT}): what was "
                "spent is unknown, so nothing is released; repair or move it"
            ) from None

    @staticmethod
    def _json(entries: dict[str, Entry]) -> dict[str, Any]:
        return {"format": FORMAT, "datasets": {k: e.to_json() for k, e in entries.items()}}

    def charge(
        self,
        dataset: Dataset,
        command: str,
        epsilon: float,
        delta: float = 0.0,
        *,
        stream: str | None = None,
        resumed: bool = False,
        record: bool = True,
    ) -> bool:
        """Refuse (PrivacyRefusal) if the spend would pass the dataset's total; else record it
        (unless `record` is False: the check before the input is opened). A stream continued
        from a state (`resumed`) costs nothing under a dataset where it is recorded already
        (returns False then); under another dataset it is charged, and recorded, like a start."""
        eps, dlt = _exact(epsilon, "--eps"), _exact(delta, "--delta")
        with self.locked() as entries:
            entry = entries.get(dataset.key) or Entry(dataset.label, None, None, [])
            if resumed and stream and _recorded(entry, stream):
                return False
            _refuse_past_total(entry, command, eps, dlt)
            if not record:
                return True
            spend = {
                "command": command,
                "epsilon": str(eps),
                "delta": str(dlt),
                "time": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            if stream:
                spend["stream"] = stream
            entry.releases.append(spend)
            entries[dataset.key] = entry
        return True

    def set_total(self, dataset: Dataset, epsilon: float, delta: float = 0.0) -> Entry:
        """Declare the dataset's total (may be below what is spent: every later run is refused)."""
        eps, dlt = _exact(epsilon, "--eps"), _exact(delta, "--delta")
        if dlt >= 1:
            raise UsageError("--delta must be below 1")
        with self.locked() as entries:
            entry = entries.get(dataset.key) or Entry(dataset.label, None, None, [])
            entry.total_epsilon, entry.total_delta = eps, dlt
            entries[dataset.key] = entry
        return entry

    def reset(self, dataset: Dataset) -> Entry | None:
        """Forget the dataset's releases and total; the entry as it was (None: none kept)."""
        with self.locked() as entries:
            return entries.pop(dataset.key, None)


def _recorded(entry: Entry, stream: str) -> bool:
    """Whether the stream's eps is recorded under this dataset already (its start, or an earlier
    continuation that read it). Under another dataset only does not count: with --input-mode new
    a run may read another file, whose people the stream's eps has not been charged to yet."""
    return any(r.get("stream") == stream for r in entry.releases)


def _refuse_past_total(entry: Entry, command: str, eps: Fraction, delta: Fraction) -> None:
    if entry.total_epsilon is None:
        return
    spent_eps, spent_delta = entry.spent
    if spent_eps + eps <= entry.total_epsilon and spent_delta + delta <= (entry.total_delta or 0):
        return
    last = entry.releases[-3:]
    when = "; ".join(
        f"{r['command']} eps {_text(Fraction(r['epsilon']))}"
        + (f" delta {_text(Fraction(r['delta']))}" if Fraction(r["delta"]) else "")
        + f" at {r['time']}"
        for r in last
    )
    earlier = len(entry.releases) - len(last)
    if earlier:
        when += f"; and {earlier} earlier"
    need = f"eps {_text(eps)}" + (f" delta {_text(delta)}" if delta else "")
    deltas = bool(delta or spent_delta or entry.total_delta)  # say them only when they matter
    raise PrivacyRefusal(
        f"privacy budget of dataset '{entry.label}' exceeded: spent eps {_text(spent_eps)}"
        + (f" delta {_text(spent_delta)}" if deltas else "")
        + f" of its total eps {_text(entry.total_epsilon)}"
        + (f" delta {_text(entry.total_delta or Fraction(0))}" if deltas else "")
        + f" ({when or 'no releases yet'}); this {command} run needs {need}: refused, nothing "
        "read or written (see `dpsynth budget show`)"
    )
