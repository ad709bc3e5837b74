"""Ports of a loopback deployment (``fedpgm.federation.ports``)."""

import socket

from fedpgm.federation.ports import ephemeral_low, free_port, port_open


def test_free_ports_lie_below_the_ephemeral_range():
    low = ephemeral_low()
    ports = [free_port() for _ in range(20)]
    assert all(1024 <= p < low for p in ports)


def test_a_port_is_open_only_while_a_process_listens_there():
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))
        port = server.getsockname()[1]
        assert not port_open(port)  # (bound, not listening)
        server.listen()
        assert port_open(port)
    assert not port_open(port)
