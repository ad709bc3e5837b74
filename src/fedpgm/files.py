"""Writing output folders and files so that a failure never leaves anything half-written, and
nothing a user owns is deleted without being asked.

``atomic_folder`` replaces an existing folder only when it holds nothing but files of the kind
being written (a model saved again), or inside ``replacing(folder)`` (the CLI's ``--force``).
The CLI is stricter: ``check_output_folder`` refuses any non-empty ``--out`` without ``--force``,
and it and ``check_output_file`` run before any work, so a bad output path fails in a second
instead of after a fit.
"""

from __future__ import annotations

import contextvars
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fedpgm.errors import FedpgmError

_REPLACEABLE: contextvars.ContextVar[frozenset[Path]] = contextvars.ContextVar("replaceable", default=frozenset())


@contextmanager
def replacing(*folders: str | Path | None) -> Iterator[None]:
    """Allow ``atomic_folder`` to replace these existing folders (``None`` entries are ignored)."""
    paths = frozenset(Path(f).resolve() for f in folders if f is not None)
    token = _REPLACEABLE.set(_REPLACEABLE.get() | paths)
    try:
        yield
    finally:
        _REPLACEABLE.reset(token)


def writable_parent(path: Path, what: str) -> None:
    """The nearest existing ancestor of ``path`` is a folder this process may write in."""
    parent = path.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise FedpgmError(f"{what} {path}: cannot write in {parent}; choose a writable place")


def check_output_folder(out: str | Path | None, force: bool = False, option: str = "--out") -> None:
    """``out`` may be written as a folder: not a file; empty, absent, or replaced with ``force``."""
    if out is None:
        return
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FedpgmError(f"{option} {out} is a file; name a folder (new or empty)")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FedpgmError(f"{option} {out} already exists and is not empty; choose a new folder or pass "
                          "--force to replace it")
    writable_parent(out, option)


def check_output_file(path: str | Path | None, option: str = "--json") -> None:
    """``path`` may be written as a file: not a folder, in a writable place."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise FedpgmError(f"{option} {path} is a folder; name a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise FedpgmError(f"{option} {path} is not writable; choose another file")
    writable_parent(path, option)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it and one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(report: dict, path: str | Path) -> None:
    """A report as indented JSON (numpy scalars as floats), written atomically."""
    write_text_atomic(path, json.dumps(report, indent=1, default=float) + "\n")


def names(folder: Path) -> list[str]:
    """Every file under ``folder``, as paths relative to it."""
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir()]


@contextmanager
def atomic_folder(out: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``out``; on success it takes the place of ``out`` in one
    rename. An existing ``out`` holding a file the new folder does not (something this writer
    did not write) is replaced only inside ``replacing(out)``; a file named ``out`` is refused.

    On an exception the temporary folder is removed and ``out`` is left as it was.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FedpgmError(f"{out} is a file; save into a folder (new or empty)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield tmp
        foreign = sorted(set(names(out)) - set(names(tmp))) if out.is_dir() else []
        if foreign and out.resolve() not in _REPLACEABLE.get():
            raise FedpgmError(f"{out} already exists and holds {foreign[:3]}{' ...' if len(foreign) > 3 else ''}, "
                              "which this save would delete; choose a new folder, or replace it with "
                              "--force (Python: inside fedpgm.files.replacing(folder))")
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
            try:
                os.replace(tmp, out)
            except OSError:
                os.replace(old / out.name, out)  # put the user's folder back
                raise
            finally:
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
