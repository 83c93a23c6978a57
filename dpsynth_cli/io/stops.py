"""Stop signals held while outputs are renamed into place, and whether the run's final outputs
are all there: a run stopped then leaves all of its files or none."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


def finished() -> bool:
    """Whether the run's final outputs are all in place (`write_outputs(final=True)`,
    `write_part_directory(final=True)`): a stop now must not turn a complete run into a failed
    one."""
    return _finished[0]


def start_run() -> None:
    """Forget an earlier run's `finished` (commands run in one process, e.g. in tests)."""
    _finished[0] = False


_finished = [False]


def _release_after_commit(done: bool) -> Callable[..., None]:
    """The exit callback that releases held stop signals after the renames: a signal held
    meanwhile is raised, unless `done` (the run's final outputs) and the renames succeeded:
    the run is then complete, and the stop is dropped."""

    def release(exc_type: Any, _exc: Any, _tb: Any) -> None:
        _set_signals_blocked(False, drop=done and exc_type is None)

    return release


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _set_signals_blocked(blocked: bool, *, drop: bool = False) -> None:
    """Hold back stop signals while outputs are renamed into place (or a temporary file is
    created and registered for removal), so that a run stopped then leaves all of its files or
    none: a signal that arrives meanwhile is recorded and raised again when they are released
    (unless `drop`: the run is complete, see `write_outputs`' `final`).

    Python runs signal handlers in the main thread whichever thread the operating system chose,
    so replacing the handlers holds even while pyarrow's threads run (pthread_sigmask would not:
    it masks the main thread only, and another thread then takes the signal)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if blocked:
        if _held is None:
            pending: list[int] = []
            handlers = {s: signal.signal(s, lambda n, _f: pending.append(n)) for s in _STOP_SIGNALS}
            globals()["_held"] = (handlers, pending)
        return
    if _held is not None:
        handlers, pending = _held
        globals()["_held"] = None
        for s, h in handlers.items():
            signal.signal(s, h)
        if pending and not drop:
            signal.raise_signal(pending[0])


_held: tuple[dict[int, Any], list[int]] | None = None


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Stop signals (SIGINT, SIGTERM, SIGHUP) wait until the block ends (`_set_signals_blocked`):
    for a few renames that must all happen once begun."""
    _set_signals_blocked(True)
    try:
        yield
    finally:
        _set_signals_blocked(False)
