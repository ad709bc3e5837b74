"""Handler sets: a process's warm-up runs once, before its first handler."""

from fedpgm.data import load_dataset, partition
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import NOTHING
from fedpgm.federation.handlers import HandlerSet
from fedpgm.federation.inprocess import InProcessFederation


def test_warm_up_runs_once_per_process_before_the_first_handler():
    events = []
    hs = HandlerSet("warm", warm_up=lambda folder: events.append("warm-up"))

    @hs.train("step", NOTHING)
    def step(request, ctx):
        events.append(f"step {ctx.client_id}")
        return Message("step")

    part = partition(load_dataset("breast_cancer", seed=0), "horizontal", 3, seed=0)
    with InProcessFederation(part, hs, mode="sequential") as fed:  # the clients share this process
        fed.broadcast("step")
        fed.broadcast("step")
    n = len(part.clients)
    assert events[0] == "warm-up" and events.count("warm-up") == 1
    assert events[1:] == [f"step client-{i}" for i in range(n)] * 2
