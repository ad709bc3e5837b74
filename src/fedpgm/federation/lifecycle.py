"""Every process fedpgm starts dies with its parent, and temporary folders go with them.

Three pieces, one per way a parent can end:

- ``stop_on_signals()``: SIGTERM and SIGHUP (what ``kill``, ``timeout`` and systemd send) raise
  ``Terminated`` in the main thread, so every ``with``/``finally`` block stops what it started
  and removes its folders, exactly as for Ctrl-C; the CLI then exits 128 + the signal (143).
- ``watch_parent()``: a forked worker polls its parent's pid and exits when it changes (the
  parent died, even by SIGKILL); siblings hold copies of each other's pipes, so a pipe's end of
  file cannot be relied on.
- ``guard()``: a per-process reaper (``fedpgm.federation.reaper``, a separate tiny process)
  to which process groups started in their own session (SuperLink, SuperNodes, ``flwr run``)
  and private temporary folders are registered. If this process dies without cleaning up
  (SIGKILL), the reaper sees its pipe close and stops those groups and removes those folders.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

POLL_S = 0.2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM/SIGHUP (a BaseException, like KeyboardInterrupt, so
    no ``except Exception`` swallows it); ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def raise_terminated(signum: int, frame) -> None:
    for s in STOP_SIGNALS:  # the clean-up that follows must not be interrupted by a second one
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise ``Terminated`` (main thread only; elsewhere a
    no-op); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, raise_terminated) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def worker_signals() -> None:
    """In a forked worker: default SIGTERM (die at once), ignore Ctrl-C (the parent stops us)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def watch_parent(on_orphan: Callable[[], None] = lambda: None) -> threading.Thread:
    """Start a daemon thread that calls ``on_orphan()`` and exits this process (code 1) as soon
    as its parent is gone (within ``POLL_S``)."""
    parent = os.getppid()

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        try:
            on_orphan()
        finally:
            os._exit(1)

    thread = threading.Thread(target=loop, name="fedpgm-watch-parent", daemon=True)
    thread.start()
    return thread


class Guard:
    """This process's reaper: ``add_group``/``forget_group``, ``add_path``/``forget_path``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(Path(__file__).with_name("reaper.py"))], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.owner = os.getpid()

    def say(self, op: str, arg: object) -> None:
        with self.lock:
            try:
                stdin = self.process.stdin
                assert stdin is not None  # (started with stdin=PIPE)
                stdin.write(f"{op} {arg}\n".encode("utf-8", "surrogateescape"))
                stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # the reaper is gone; the parent's own clean-up still runs

    def add_group(self, pgid: int) -> None:
        self.say("+g", pgid)

    def forget_group(self, pgid: int) -> None:
        self.say("-g", pgid)

    def add_path(self, path: str | Path) -> None:
        self.say("+p", Path(path).resolve())

    def forget_path(self, path: str | Path) -> None:
        self.say("-p", Path(path).resolve())


_guard: Guard | None = None


def guard() -> Guard:
    """The reaper of this process (started on first use; a forked child starts its own)."""
    global _guard
    if _guard is None or _guard.owner != os.getpid():
        _guard = Guard()
    return _guard


@contextmanager
def private_tempdir(prefix: str) -> Iterator[Path]:
    """A temporary folder only this user can read (0700), removed on every exit path: by this
    block, or by the reaper if the process is killed."""
    path = Path(tempfile.mkdtemp(prefix=prefix))  # mkdtemp creates it with mode 0700
    guard().add_path(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        guard().forget_path(path)
