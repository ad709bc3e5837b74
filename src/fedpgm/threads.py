"""Thread limits for fair timing: every client and every reference it is compared with run
under the same limits, so CPU seconds measure work, not thread pools spinning.

``one_thread()`` caps torch, BLAS and OpenMP (scikit-learn's KMeans, numpy's linear algebra) at
one thread inside the block and restores them after. The in-process backend's workers apply the
same limits for their whole life (``fedpgm.federation.inprocess``).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from threadpoolctl import threadpool_limits


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
