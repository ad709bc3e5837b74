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

A group is registered with its leader's start time, read when ``+g`` arrives: a group whose
processes all exited frees its id, and an unrelated session leader that later gets the same id
(it runs with that start time no more) is left alone. A line the reaper cannot read is skipped,
so that one bad line never costs the clean-up of the rest.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from typing import Iterable

GRACE_S = 5.0
PID_MAX = 2**22  # (Linux's largest process id)


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError, OverflowError):
        return False


def signal_groups(groups: set[int], sig: int) -> None:
    for g in groups:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError, OverflowError):
            pass


def stat(pid: int) -> list[str] | None:
    """Process ``pid``'s /proc stat fields from the third on (state, parent, group, ...), or None
    if it is gone (or this is not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            line = f.read()
        fields = line[line.rindex(")") + 2:].split()
    except (OSError, ValueError):
        return None
    return fields if len(fields) > 19 else None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), or None if it is gone."""
    fields = stat(pid)
    return int(fields[19]) if fields else None  # (field 22: starttime)


def still_ours(groups: dict[int, int | None]) -> set[int]:
    """The registered groups (id -> its leader's start time at registration) whose id is not a
    later process's: a leader running since then, or no leader (its members, if any, keep the
    id from being reused)."""
    return {g for g, started in groups.items() if start_time(g) in (started, None)}


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process (from Linux's /proc; none elsewhere)."""
    table: dict[int, tuple[int, int]] = {}
    names = os.listdir("/proc") if os.path.isdir("/proc") else []
    for name in names:
        if name.isdigit():
            fields = stat(int(name))
            if fields:  # (None: a process that just exited)
                table[int(name)] = (int(fields[1]), int(fields[2]))
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


def runs_a_reaper(pid: int, wait_s: float = 0.5) -> bool:
    """Whether process ``pid`` is a reaper (the script its interpreter runs is this file): a
    guarded process's own, left to clean up after it. A process still inside ``exec`` has an
    empty command line for a moment (seen in a test); it is read again for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")[1:]
        except OSError:
            return False
        fields = stat(pid)
        if args or time.monotonic() > deadline or not fields or fields[0] == "Z":
            break
        time.sleep(0.01)
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
    groups: dict[int, int | None] = {}
    paths: set[str] = set()
    for line in sys.stdin.buffer:
        op, _, arg = line.decode("utf-8", "surrogateescape").rstrip("\n").partition(" ")
        if op in ("+g", "-g") and not (arg.isascii() and arg.isdigit() and 0 < int(arg) <= PID_MAX):
            continue  # (unreadable: skipped; group 0 would be the reaper's own)
        if op == "+g":
            groups[int(arg)] = start_time(int(arg))
        elif op == "-g":
            groups.pop(int(arg), None)
        elif op == "+p":
            paths.add(arg)
        elif op == "-p":
            paths.discard(arg)
    reap(still_ours(groups), paths)


if __name__ == "__main__":
    main()
