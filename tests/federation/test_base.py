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
