"""Writing output folders so that a failure never leaves anything half-written."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_folder(out: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``out``; on success it replaces ``out`` in one rename.

    On an exception the temporary folder is removed and ``out`` is left as it was.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
