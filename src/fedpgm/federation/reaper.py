"""The reaper: a tiny guard process that cleans up after a parent that died without doing so.

Started by ``fedpgm.federation.lifecycle.guard()`` as ``python reaper.py`` (run by path, so it
imports only the standard library and starts in ~30 ms), in a session of its own. It reads
lines from its stdin, whose write end only the parent holds:

    +g PGID   a process group to stop      -g PGID   forget it (the parent stopped it)
    +p PATH   a folder to remove           -p PATH   forget it (the parent removed it)

When stdin reaches end of file (the parent exited, normally, by a signal or by SIGKILL), every
group still registered, and the group of every descendant of their processes (helpers that
started sessions of their own, as Flower's SuperExec and Ray's agents do; not a descendant's own
reaper, which cleans up after it), gets SIGTERM, then SIGKILL after ``GRACE_S``, and every
folder still registered is removed. A parent that cleaned up after itself has forgotten
everything, so the reaper then simply exits.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from typing import Iterable

GRACE_S = 5.0


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_groups(groups: set[int], sig: int) -> None:
    for g in groups:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process (from Linux's /proc; none elsewhere)."""
    table: dict[int, tuple[int, int]] = {}
    names = os.listdir("/proc") if os.path.isdir("/proc") else []
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
                table[int(name)] = (int(fields[1]), int(fields[2]))
            except (OSError, ValueError, IndexError):
                continue  # (a process that just exited)
    return table


def descendant_groups(roots: Iterable[int], table: dict[int, tuple[int, int]] | None = None) -> set[int]:
    """The process groups of every descendant of the processes ``roots`` (``process_table``)."""
    table = process_table() if table is None else table
    found: set[int] = set()
    frontier = set(roots)
    while frontier:
        children = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
        found |= children
        frontier = children
    return {table[pid][1] for pid in found}


def runs_a_reaper(pid: int) -> bool:
    """Whether process ``pid`` is a reaper (the script its interpreter runs is this file): a
    guarded process's own, left to clean up after it."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")[1:]
    except OSError:
        return False
    script = next((a for a in args if not a.startswith(b"-")), b"")
    return script == os.path.abspath(__file__).encode()


def reap(groups: set[int], paths: set[str]) -> None:
    """Stop every group and the groups of their processes' descendants but reapers (TERM, then
    KILL after the grace period to those still alive) and remove every folder."""
    if groups:
        table = process_table()
        members = [pid for pid, (_, g) in table.items() if g in groups]
        groups = groups | {g for g in descendant_groups(members, table) if not runs_a_reaper(g)}
    signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while any(alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    signal_groups({g for g in groups if alive(g)}, signal.SIGKILL)
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the parent is not for us
    groups: set[int] = set()
    paths: set[str] = set()
    for line in sys.stdin.buffer:
        op, _, arg = line.decode("utf-8", "surrogateescape").rstrip("\n").partition(" ")
        if op == "+g":
            groups.add(int(arg))
        elif op == "-g":
            groups.discard(int(arg))
        elif op == "+p":
            paths.add(arg)
        elif op == "-p":
            paths.discard(arg)
    reap(groups, paths)


if __name__ == "__main__":
    main()
