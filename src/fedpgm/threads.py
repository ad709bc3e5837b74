"""Thread limits for fair timing: every client and every reference it is compared with run
under the same limits, so CPU seconds measure work, not thread pools spinning.

``one_thread()`` caps torch, BLAS and OpenMP (scikit-learn's KMeans, numpy's linear algebra) at
one thread inside the block and restores them after. The in-process backend's workers apply the
same limits for their whole life (``fedpgm.federation.inprocess``).

``threads_for(cells)`` chooses threads per call size: a call on fewer than ``PARALLEL_CELLS``
cells runs on one thread, a larger one under whatever limits hold around it. A second thread
costs more in start-up and spinning than it saves on small calls, and far more on a busy
machine (2 cores, load 3: ``rdc_matrix`` on 1,000 x 20 took 9 ms on one thread and 78 ms on two;
on 50,000 x 20, 0.48 s and 0.50 s).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from functools import cache
from typing import Iterator

from threadpoolctl import ThreadpoolController, threadpool_limits

PARALLEL_CELLS = 500_000  # (rows x columns) from which a call keeps more than one thread


def limit_torch(threads: int) -> int | None:
    """Set torch's intra-op threads if torch is loaded; the previous count (None without torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    return before


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch, BLAS and OpenMP on one thread inside the block (as each client runs)."""
    before = limit_torch(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        if before is not None:
            limit_torch(before)


@cache
def controller() -> ThreadpoolController:
    """The thread pools loaded at first use, found once (``threadpool_limits`` scans the loaded
    libraries on every call: 4 ms, longer than many of the calls it would limit)."""
    return ThreadpoolController()


@contextmanager
def threads_for(cells: int) -> Iterator[None]:
    """One thread (torch, BLAS, OpenMP) inside the block for a call on fewer than
    ``PARALLEL_CELLS`` cells; the limits around it otherwise (never more threads than those)."""
    if cells >= PARALLEL_CELLS:
        yield
        return
    before = limit_torch(1)
    try:
        with controller().limit(limits=1):
            yield
    finally:
        if before is not None:
            limit_torch(before)
