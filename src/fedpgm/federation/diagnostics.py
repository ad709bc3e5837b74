"""Diagnostic handlers: round trips, slow and failing clients.

Used by ``benchmarks/runtime.py`` (latency and throughput), by failure tests, and to check a
deployment end to end. ``echo`` returns the server's own arrays (never client data).
"""

from __future__ import annotations

import os
import time
from typing import Sequence

from fedpgm.federation.codec import Message
from fedpgm.federation.contract import NOTHING, Array, Contract, Float, Int, ListOf, Text
from fedpgm.federation.handlers import ClientContext, HandlerSet

HANDLERS = HandlerSet("diagnostics")


@HANDLERS.query("echo", Contract(arrays={"*": Array("biuf")}))
def echo(request: Message, ctx: ClientContext) -> Message:
    return Message("echo", request.arrays, {"client": ctx.client_id})


@HANDLERS.query("sleep", Contract({"seconds": Float(0.0, 3600.0)}))
def sleep(request: Message, ctx: ClientContext) -> Message:
    time.sleep(float(request.config.get("seconds", 1.0)))
    return Message("sleep", config={"client": ctx.client_id})


@HANDLERS.query("fail", Contract({"reason": Text()}))
def fail(request: Message, ctx: ClientContext) -> Message:
    raise RuntimeError(request.config.get("reason", "failing on request"))


@HANDLERS.query("crash", NOTHING)
def crash(request: Message, ctx: ClientContext) -> Message:
    """Ends the client's process without a reply (in the in-process backend)."""
    os._exit(3)


@HANDLERS.train("remember", Contract({"value": Int(-10**9, 10**9)}))
def remember(request: Message, ctx: ClientContext) -> Message:
    """Adds the request's ``value`` to a counter kept in state: state survives messages."""
    ctx.state["count"] = ctx.state.get("count", 0) + int(request.config.get("value", 1))
    return Message("remember", config={"count": ctx.state["count"]})


@HANDLERS.train("contribute", Contract({"fail": ListOf(Text()), "repeat": Int(0, 10**6)}, arrays={"v/*": Array("f")},
                                        update=True))
def contribute(request: Message, ctx: ClientContext) -> Message:
    """Returns the vector ``v/CLIENT`` the server chose for this client (or fails if it is named in
    ``fail``): the operand of secure-sum checks, never client data. Every client is sent the same
    request, as the members of a secure sum insist (``fedpgm.federation.secagg_guard``)."""
    if ctx.client_id in request.config.get("fail", []):
        raise RuntimeError("failing on request")
    return Message("contribute", {"v": request.arrays[f"v/{ctx.client_id}"]}, {"client": ctx.client_id})


def secure_sum_probe(fed, vectors: dict[str, list[float]], fail: Sequence[str] = (), repeats: int = 1) -> dict:
    """Server procedure: the sum of ``vectors`` (client -> values) by SecAgg+ and in the clear,
    ``repeats`` times each (seconds of each), with the survivors (clients in ``fail`` drop out),
    the masked vectors the server saw, the parties that signed the request they were sent and the
    bytes of each kind of round."""
    import time

    import numpy as np

    arrays = {f"v/{c}": np.asarray(v, dtype=np.float64) for c, v in vectors.items()}
    secure, plain = [], []
    for repeat in range(repeats):  # (each repeat its own request: a client adds to one sum of a request)
        requests = {c: (arrays, {"fail": list(fail), "repeat": repeat}) for c in vectors}
        t0 = time.perf_counter()
        sums, replies = fed.secure_sum("contribute", ["v"], requests)
        secure.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        answered = fed.broadcast("contribute", per_client=requests, clients=list(replies)).require_all()
        clear = np.sum([m.arrays["v"] for m in answered.values()], axis=0)
        plain.append(time.perf_counter() - t0)
    by_name = fed.ledger.totals()["bytes_by_message"]
    return {"sum": sums[0].tolist(), "plain_sum": clear.tolist(), "survivors": sorted(replies),
            "secure_s": secure, "plain_s": plain, "left_out": fed.left_out_report(),
            "masked": {c: [a.tolist() for a in v] for c, v in fed.secagg_view.items()},
            "signed": fed.secagg_signers,
            "secure_bytes": by_name.get("contribute/secagg", 0) // repeats,
            "plain_bytes": by_name.get("contribute", 0) // repeats}


def roundtrip_benchmark(fed, sizes: Sequence[int] = (1_000, 1_000_000, 50_000_000), repeats: int = 5,
                        client: str | None = None) -> dict:
    """Server procedure: ``echo`` round trips to one client for each payload size (bytes).

    Returns per size the median round-trip seconds and the throughput (bytes moved down and
    up, per second of round trip).
    """
    import statistics
    import time

    import numpy as np

    target = client or fed.clients[0]
    out = {}
    for size in sizes:
        payload = {"x": np.zeros(max(1, int(size) // 8), dtype=np.float64)}
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fed.send(target, "echo", payload).require_all()
            times.append(time.perf_counter() - t0)
        rtt = statistics.median(times)
        out[str(size)] = {"rtt_s": rtt, "rtt_all_s": times, "mb_per_s": 2 * size / rtt / 1e6}
        fed.log(f"echo {size} B: median round trip {rtt * 1e3:.2f} ms")
    return {"client": target, "sizes": out}
