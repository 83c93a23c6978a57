"""Saving and resuming the online mechanism's whole state (`--state DIR`).

The state is SECRET: it holds exact per-region counts, the noise already drawn (thresholds,
Binary Mechanism nodes, level totals), the pending firing times and, for d = 1, the rows' codes.
Anyone who reads it learns far more than the releases. It is written with owner-only
permissions (directory 0700, file 0600) and must never be published or shared.

Layout: DIR/state.npz, one file (numpy arrays plus the metadata as JSON), and DIR/staging/, the
releases a run has drawn and not yet published (`staging_dir`). A save is one atomic replace: it
is written to a temporary file in DIR (created 0600), flushed, fsynced, renamed over the old
file, and the directory is fsynced. A crash or SIGKILL at any moment leaves either the
old state or the new one, never a mix; temporary files of dead processes are removed on the next
run. DIR/lock is held (flock) for the whole run, so two runs never continue the same state (that
would release the same checkpoint twice with independent noise: a double spend).

A state is only continued by a run with the same columns, types, bounds, epsilon, neighbouring
relation and allocation; anything else is refused (`PrivacyRefusal`, exit 3) with a one-line
reason, since a different mechanism on the same stream would spend its budget again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any, BinaryIO

import numpy as np

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.errors import DataError, PrivacyRefusal, UsageError
from dpsynth_cli.io import fsync_dir, process_alive
from dpsynth_cli.online.counters import CounterBank
from dpsynth_cli.online.engine import OnlineEngine
from dpsynth_cli.online.params import OnlinePlan

FORMAT = "dpsynth.online-state/1"
STATE_FILE = "state.npz"
LOCK_FILE = "lock"
STAGING = "staging"  # DIR/staging: releases drawn but not yet published (as secret as DIR)
_TMP_PREFIX = ".state.npz."


def identity(plan: OnlinePlan, specs: list[ColumnSpec]) -> dict[str, Any]:
    """What a state must share with a run that continues it (all public)."""
    return {
        "columns": [_column(s) for s in specs],
        "epsilon": str(plan.epsilon),
        "neighbouring_relation": plan.relation,
        "allocation": plan.allocation,
    }


def _column(s: ColumnSpec) -> dict[str, Any]:
    """A column's identity: name, type and bounds, and (issue 25, only when set, so that states
    of numeric columns made before continue) levels, other, nullable, time zone and resolution."""
    out: dict[str, Any] = {"name": s.name, "type": s.kind, "lower": s.lower, "upper": s.upper}
    extra = {"levels": list(s.levels or ()), "other": s.other, "nullable": s.nullable}
    extra |= {"timezone": s.timezone, "resolution": s.resolution if s.step > 1 else None}
    out.update({k: v for k, v in extra.items() if v})
    return out


def _difference(stored: dict[str, Any], current: dict[str, Any]) -> str | None:
    """A one-line reason why `current` may not continue `stored`, or None."""
    a, b = stored["columns"], current["columns"]
    if [c["name"] for c in a] != [c["name"] for c in b]:
        names = ",".join(c["name"] for c in a)
        return f"it was made for the columns {names}, not " + ",".join(c["name"] for c in b)
    for x, y in zip(a, b, strict=True):
        if x["type"] != y["type"]:
            return f"column '{x['name']}' was {x['type']} there, {y['type']} here"
        if (x["lower"], x["upper"]) != (y["lower"], y["upper"]):
            return f"the bounds of column '{x['name']}' differ from the state's"
        for key in ("levels", "other", "nullable", "timezone", "resolution"):
            if x.get(key) != y.get(key):
                return f"the {key} of column '{x['name']}' differ from the state's"
    if stored["epsilon"] != current["epsilon"]:
        return f"it was made with --eps {float(Fraction(stored['epsilon'])):g}"
    if stored["neighbouring_relation"] != current["neighbouring_relation"]:
        return f"it was made with --neighboring {stored['neighbouring_relation']}"
    if stored["allocation"] != current["allocation"]:
        return f"it was made with --allocation {stored['allocation']}"
    return None


@contextlib.contextmanager
def locked(state_dir: str) -> Iterator[None]:
    """Create DIR (0700) if needed and hold its lock for the block; refuse if another run has it."""
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        os.chmod(state_dir, 0o700)
        fd = os.open(os.path.join(state_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise DataError(f"cannot use state directory {state_dir}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PrivacyRefusal(
                f"state {state_dir} is in use by another run (continuing it twice would "
                "release checkpoints twice)"
            ) from None
        _remove_stale(state_dir)
        yield
    finally:
        os.close(fd)


def staging_dir(state_dir: str) -> str:
    """DIR/staging (0700), where a run writes its releases until its state is committed: only
    the owner can read them there, and `--out-dir` (public) sees a release only once it is
    committed (`replay`'s commit order)."""
    path = os.path.join(state_dir, STAGING)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError as exc:
        raise DataError(f"cannot use state directory {state_dir}: {exc.strerror}") from None
    return path


def _remove_stale(state_dir: str) -> None:
    for name in os.listdir(state_dir):
        if name.startswith(_TMP_PREFIX) and name.endswith(".tmp"):
            pid = name[len(_TMP_PREFIX) :].split(".")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(state_dir, name))


def write_secret(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Atomic owner-only write of what `write` writes to the file it is given: temp file (0600)
    in the same directory, fsync, rename, fsync dir. Written straight to the file, not built in
    memory first: the state of a long stream is about 1 GiB at 10^7 rows."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{_TMP_PREFIX}{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def save(state_dir: str, engine: OnlineEngine, meta: dict[str, Any]) -> None:
    """Write the engine's whole state and `meta` (the caller holds `locked(state_dir)`)."""
    if hasattr(engine, "state_meta"):  # online/marginals (issue 39)
        arrays = dict(engine.arrays())
        full = {**meta, "format": FORMAT, **engine.state_meta()}
        arrays["meta"] = np.frombuffer(json.dumps(full).encode("utf-8"), dtype=np.uint8)
        write_secret(os.path.join(state_dir, STATE_FILE), lambda fh: np.savez(fh, **arrays))
        return
    arrays: dict[str, np.ndarray] = {}
    for j, bank in enumerate(engine.banks, start=1):
        for name, arr in bank.arrays().items():
            arrays[f"bank{j}.{name}"] = arr
    if engine.history is not None:
        arrays["history"] = engine.history
    full = {
        **meta,
        "format": FORMAT,
        "t": engine.t,
        "level": engine.level,
        "d": engine.plan.d,
        "replicas": engine.replicas,
    }
    arrays["meta"] = np.frombuffer(json.dumps(full).encode("utf-8"), dtype=np.uint8)
    write_secret(os.path.join(state_dir, STATE_FILE), lambda fh: np.savez(fh, **arrays))


def stored(state_dir: str, ident: dict[str, Any]) -> dict[str, Any] | None:
    """The metadata of the state in DIR (None: none yet), refused as `load` would refuse it
    (damaged, another format, made for other columns or flags) but without reading its counts:
    the check before a continuation's spend is recorded. `load` checks again, under the lock."""
    path = os.path.join(state_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode("utf-8"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        raise DataError(f"state {state_dir} is damaged or not a dpsynth state") from None
    _check_meta(state_dir, meta, ident)
    return meta


def _check_meta(state_dir: str, meta: Any, ident: dict[str, Any]) -> None:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UsageError(f"state {state_dir} has an unknown format")
    reason = _difference(meta["identity"], ident)
    if reason is not None:
        raise PrivacyRefusal(f"refusing to continue state {state_dir}: {reason}")


def load(
    state_dir: str, plan: OnlinePlan, ident: dict[str, Any], specs: list[ColumnSpec] = ()
) -> tuple[OnlineEngine, dict]:
    """The saved engine (partition's, or `online.marginals`' when the state says so) and
    metadata, or a fresh partition engine and {} when DIR holds no state yet."""
    path = os.path.join(state_dir, STATE_FILE)
    if not os.path.exists(path):
        return OnlineEngine(plan), {}
    try:
        with np.load(path, allow_pickle=False) as z:
            files = {k: z[k] for k in z.files}
        meta = json.loads(bytes(files.pop("meta")).decode("utf-8"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        raise DataError(f"state {state_dir} is damaged or not a dpsynth state") from None
    _check_meta(state_dir, meta, ident)
    if meta.get("mechanism") == "marginals":
        from dpsynth_cli.online.cube import StreamCube
        from dpsynth_cli.online.marginals import MarginalsEngine

        cube = StreamCube(tuple(specs))
        return MarginalsEngine.from_state(cube, plan.epsilon, plan.relation, meta, files), meta
    engine = OnlineEngine(
        plan, replicas=int(meta.get("replicas", 1)), t=int(meta["t"]), level=int(meta["level"])
    )
    for j in range(1, max(engine.level, 0) + 1):
        prefix = f"bank{j}."
        engine.banks.append(
            CounterBank.from_arrays(
                {k[len(prefix) :]: v for k, v in files.items() if k.startswith(prefix)}
            )
        )
    engine.history = files.get("history")
    return engine, meta
