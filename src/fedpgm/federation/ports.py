"""Ports on 127.0.0.1 for the processes of a loopback deployment: one free now, chosen below the
kernel's ephemeral range, and whether one is listening."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from fedpgm.errors import FedpgmError


def ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free on 127.0.0.1 now, chosen below the ephemeral range: a port the kernel would
    pick itself (bind to 0) may be taken by some outgoing connection before the child process
    that is told to listen there binds it."""
    low = ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randrange(max(1024, low - 16384), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise FedpgmError(f"no free port found on 127.0.0.1 below {low}; free some or pass port=")


def port_open(port: int) -> bool:
    """Whether a process listens on ``port`` of 127.0.0.1 (a connection succeeds within 0.2 s)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
