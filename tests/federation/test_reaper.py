"""The reaper (``fedpgm.federation.reaper``): what a parent registered dies when the parent's
pipe closes, helpers that left its process groups for sessions of their own included."""

import os
import subprocess
import sys
import time

from fedpgm.federation import reaper

SPAWN = """
import subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(helper.pid, flush=True)
time.sleep(120)
"""


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_reaper_stops_a_registered_group_and_the_sessions_its_processes_started(tmp_path):
    """A registered process starts a helper in a session of its own (as Flower's SuperExec and
    Ray's agents are started); when the reaper's stdin closes, both are stopped and the
    registered folder is gone, within the grace period."""
    guard = subprocess.Popen([sys.executable, reaper.__file__], stdin=subprocess.PIPE, start_new_session=True)
    group = subprocess.Popen([sys.executable, "-c", SPAWN], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    helper = 0
    try:
        helper = int(group.stdout.readline())
        assert os.getpgid(helper) == helper != group.pid and reaper.descendant_groups([group.pid]) == {helper}
        (tmp_path / "work").mkdir()
        guard.stdin.write(f"+g {group.pid}\n+p {tmp_path / 'work'}\n".encode())
        guard.stdin.close()
        group.wait(timeout=reaper.GRACE_S + 5)  # (reaped here: a zombie still counts as its group)
        guard.wait(timeout=reaper.GRACE_S + 5)
        deadline = time.monotonic() + 5
        while running(helper) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not running(helper) and group.returncode == -15 and not (tmp_path / "work").exists()
    finally:
        reaper.signal_groups({group.pid, helper} - {0}, 9)
        guard.kill()


NESTED = """
import subprocess, sys, time
own = subprocess.Popen([sys.executable, "-I", sys.argv[1]], stdin=subprocess.PIPE, start_new_session=True)
own.stdin.write(("+p " + sys.argv[2] + "\\n").encode())
own.stdin.flush()
print(own.pid, flush=True)
time.sleep(120)
"""


def test_a_registered_process_whose_own_reaper_outlives_it_gets_its_folders_removed(tmp_path):
    """A registered process that has a reaper of its own (a guarded fedpgm process started by a
    guarded one): the outer reaper stops the process and leaves its reaper alone, which then
    removes the folder registered with it."""
    (tmp_path / "inner").mkdir()
    guard = subprocess.Popen([sys.executable, reaper.__file__], stdin=subprocess.PIPE, start_new_session=True)
    group = subprocess.Popen([sys.executable, "-c", NESTED, reaper.__file__, str(tmp_path / "inner")],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    inner = 0
    try:
        inner = int(group.stdout.readline())
        assert reaper.runs_a_reaper(inner) and not reaper.runs_a_reaper(group.pid)
        guard.stdin.write(f"+g {group.pid}\n".encode())
        guard.stdin.close()
        group.wait(timeout=reaper.GRACE_S + 5)
        guard.wait(timeout=reaper.GRACE_S + 5)
        deadline = time.monotonic() + 5
        while (tmp_path / "inner").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not (tmp_path / "inner").exists() and group.returncode == -15
    finally:
        reaper.signal_groups({group.pid, inner} - {0}, 9)
        guard.kill()


def test_a_group_whose_id_a_later_process_took_is_left_alone():
    """A group id is the reaper's only while its leader is the process registered (its start
    time the same) or gone; a process that started later under that id is not stopped."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        started = reaper.start_time(proc.pid)
        assert started is not None and reaper.still_ours({proc.pid: started}) == {proc.pid}
        assert reaper.still_ours({proc.pid: started - 1}) == set()  # (as if the id had been reused)
        assert reaper.still_ours({proc.pid: None}) == set()  # (its leader was gone when it was registered)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert reaper.start_time(proc.pid) is None and reaper.still_ours({proc.pid: started}) == {proc.pid}


def test_an_unreadable_line_costs_nothing_of_the_rest(tmp_path):
    """A line the reaper cannot read is skipped: the group and the folder registered after it are
    still cleaned up."""
    (tmp_path / "work").mkdir()
    guard = subprocess.Popen([sys.executable, reaper.__file__], stdin=subprocess.PIPE, start_new_session=True)
    group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        junk = "+g twelve\n-g\n+g ²\n+g 0\n+g 99999999999999999999\n"  # (group 0 would be the reaper's own)
        guard.stdin.write(f"{junk}+g {group.pid}\n+p {tmp_path / 'work'}\n".encode())
        guard.stdin.close()
        assert group.wait(timeout=reaper.GRACE_S + 5) == -15  # (reaped here: a zombie still counts as its group)
        assert guard.wait(timeout=reaper.GRACE_S + 5) == 0 and not (tmp_path / "work").exists()
    finally:
        group.kill()
        guard.kill()
