import numpy as np
import pytest

from fedpgm.federation.base import ClientFailed, Federation
from fedpgm.federation.codec import Message, encode


class Scripted(Federation):
    """Replies given bytes per client: exercises the shared server-side logic."""

    def __init__(self, replies):
        super().__init__(list(replies))
        self.replies = replies

    def _exchange(self, requests, names, timeout):
        return {c: self.replies[c] for c in requests}


def test_undecodable_reply_is_a_typed_failure_and_ledger_counts_bytes():
    good = encode(Message("echo", {"x": np.ones(3)}))
    fed = Scripted({"a": good, "b": b"garbage!"})
    r = fed.broadcast("echo", {"y": np.zeros(10)})
    assert set(r.messages) == {"a"} and r.failures["b"].kind == "decode"
    assert "bad magic" in r.failures["b"].detail
    t = fed.ledger.totals()
    assert t["bytes_up"] == len(good) + len(b"garbage!") and t["messages"] == 4 and t["rounds"] == 1
    assert t["bytes_down"] == 2 * len(encode(Message("echo", {"y": np.zeros(10)})))
    with pytest.raises(ClientFailed, match="client 'b' failed on 'echo' \\(decode\\)"):
        r["b"]


class Flaky(Federation):
    """Client 'b' is unavailable on the first exchange and back on the second (or never)."""

    def __init__(self, comes_back: bool):
        super().__init__(["a", "b"], timeout=5)
        self.comes_back, self.calls, self.awaited = comes_back, 0, []

    def _exchange(self, requests, names, timeout):
        from fedpgm.federation.base import ClientFailure

        self.calls += 1
        reply = encode(Message("echo", {"x": np.ones(2)}))
        back = self.calls > 1 and self.comes_back
        return {c: reply if c == "a" or back else ClientFailure(c, names[c], "unavailable", "node gone")
                for c in requests}

    def await_return(self, clients, deadline):
        self.awaited.append((clients, deadline is not None))


def test_an_unavailable_client_is_asked_once_more_after_waiting_for_it():
    fed = Flaky(comes_back=True)
    r = fed.broadcast("echo")
    assert sorted(r.messages) == ["a", "b"] and fed.calls == 2 and fed.awaited == [(["b"], True)]
    assert fed.ledger.totals()["messages"] == 5  # 2 down, 1 down again, 2 up
    gone = Flaky(comes_back=False)
    r = gone.broadcast("echo")
    assert r.failures["b"].detail == "node gone; asked again: node gone" and gone.calls == 2
    assert gone.clients == ["a"]  # lost for the rest of the run


@pytest.mark.timing
def test_flower_waits_for_a_node_to_be_online_again_before_the_retry():
    import time

    from fedpgm.federation.flower import FlowerFederation

    class Grid:
        def __init__(self):
            self.polls = 0

        def get_node_ids(self):
            self.polls += 1
            return [1, 2] if self.polls >= 3 else [1]

    fed = FlowerFederation.__new__(FlowerFederation)
    fed.grid, fed.node_of = Grid(), {"a": 1, "b": 2}
    t0 = time.monotonic()
    fed.await_return(["b"], deadline=time.monotonic() + 10)
    assert fed.grid.polls == 3 and time.monotonic() - t0 < 5
    fed.grid.polls = -100  # never back: the deadline ends the wait
    t0 = time.monotonic()
    fed.await_return(["b"], deadline=time.monotonic() + 1.5)
    assert 1.4 < time.monotonic() - t0 < 4
