"""Diagnostic handlers: round trips, slow and failing clients.

Used by ``benchmarks/runtime.py`` (latency and throughput), by failure tests, and to check a
deployment end to end. ``echo`` returns the server's own arrays (never client data).
"""

from __future__ import annotations

import os
import time

from fedpgm.federation.codec import Message
from fedpgm.federation.handlers import ClientContext, HandlerSet

HANDLERS = HandlerSet("diagnostics")


@HANDLERS.query("echo")
def echo(request: Message, ctx: ClientContext) -> Message:
    return Message("echo", request.arrays, {"client": ctx.client_id})


@HANDLERS.query("sleep")
def sleep(request: Message, ctx: ClientContext) -> Message:
    time.sleep(float(request.config.get("seconds", 1.0)))
    return Message("sleep", config={"client": ctx.client_id})


@HANDLERS.query("fail")
def fail(request: Message, ctx: ClientContext) -> Message:
    raise RuntimeError(request.config.get("reason", "failing on request"))


@HANDLERS.query("crash")
def crash(request: Message, ctx: ClientContext) -> Message:
    """Ends the client's process without a reply (in the in-process backend)."""
    os._exit(3)


@HANDLERS.train("remember")
def remember(request: Message, ctx: ClientContext) -> Message:
    """Adds the request's ``value`` to a counter kept in state: state survives messages."""
    ctx.state["count"] = ctx.state.get("count", 0) + int(request.config.get("value", 1))
    return Message("remember", config={"count": ctx.state["count"]})
