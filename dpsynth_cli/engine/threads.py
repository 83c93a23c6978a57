"""The machine's cores for work that is the same whatever thread does it (issue 27).

numpy's array loops, its generators' bulk draws and pyarrow's readers and writers release the
GIL, so threads run them side by side. Only work whose result does not depend on which thread
does it, or in what order, is spread here: placing output batches (each has its own generator,
`BatchPlan`) and adding batches to exact-integer statistics that merge in any order
(`engine.rows`). A run's output is therefore the same with one thread or several. While they
run, BLAS is held to one thread (`threadpoolctl`): matrix products inside a pass would
otherwise start BLAS threads from each of ours, which spin on the same cores.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import threadpoolctl

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 4  # past a few, the batches wait on memory bandwidth and the writer


def cores() -> int:
    """The cores this process may run on (its CPU affinity), at most MAX_THREADS."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


def _one_blas_thread() -> threadpoolctl.threadpool_limits:
    """BLAS on one thread until the context ends (then as it was)."""
    return threadpoolctl.threadpool_limits(limits=1, user_api="blas")


def ordered_map(f: Callable[[T], R], items: Iterable[T], threads: int | None = None) -> Iterator[R]:
    """f over items on `threads` threads (default: `cores()`), results in the items' order.

    Lazy with a bounded window: at most `threads` + 1 items are taken ahead of the one the caller
    holds, so memory is a few results, never all of them. One thread: a plain map, in this one.
    An error in f is raised when its result is reached; the rest are cancelled or waited for.
    """
    threads = cores() if threads is None else threads
    if threads <= 1:
        yield from map(f, items)
        return
    with _one_blas_thread(), ThreadPoolExecutor(threads, thread_name_prefix="dpsynth") as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(f, item))
                if len(pending) > threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def collect(
    batches: Iterable[T],
    make: Callable[[], R],
    add: Callable[[R, T], None],
    threads: int | None = None,
) -> R:
    """One pass: every batch added to an accumulator from `make`, on `threads` threads.

    Each thread adds the batches it takes (one at a time from the shared iterator, which only
    one thread advances at once) to an accumulator of its own; the accumulators are merged at
    the end (`merge`). For statistics that merge in any order to the same value (exact
    integers, `rows.any_order`) this is the one-thread result, whichever thread took which
    batch. An error ends the pass (the threads take no more batches) and is the one thread's
    error too: every batch before the first failing one was taken and is finished, so the
    failure of the earliest batch is raised.
    """
    threads = cores() if threads is None else threads
    if threads <= 1:
        acc = make()
        for batch in batches:
            add(acc, batch)
        return acc
    items, lock, stop = iter(batches), threading.Lock(), threading.Event()
    taken = 0
    failures: list[tuple[int, BaseException]] = []

    def work() -> R | None:
        nonlocal taken
        acc = make()
        while not stop.is_set():
            with lock:
                index, taken = taken, taken + 1
                try:
                    batch = next(items, _END)
                except BaseException as exc:  # the reader's error, at its batch
                    failures.append((index, exc))
                    stop.set()
                    return None
            if batch is _END:
                break
            try:
                add(acc, batch)
            except BaseException as exc:
                failures.append((index, exc))
                stop.set()
                return None
        return acc

    with _one_blas_thread(), ThreadPoolExecutor(threads, thread_name_prefix="dpsynth") as pool:
        futures = [pool.submit(work) for _ in range(threads)]
        try:
            accs = [future.result() for future in futures]
        except BaseException:  # here, in this thread: a stop signal
            stop.set()
            raise
    if failures:
        raise min(failures, key=lambda failure: failure[0])[1]
    acc = accs[0]
    for other in accs[1:]:
        acc = acc.merge(other)
    return acc


_END = object()
