"""Client side: handlers registered by message name, and the context each one receives.

A federated algorithm defines one ``HandlerSet``::

    HANDLERS = HandlerSet("moments")

    @HANDLERS.query("describe", NOTHING)
    def describe(request: Message, ctx: ClientContext) -> Message: ...

    @HANDLERS.train("fit", Contract({"clusters": Int(1, 64)}, required=("clusters",)))
    def fit(request: Message, ctx: ClientContext) -> Message: ...

Every handler declares its request contract (``fedpgm.federation.contract``): each config field
and array the server may send, with the range the client allows; ``HandlerSet.handle`` refuses a
request outside it before the handler runs, and refuses every request past the policy's
per-run budget (``max_requests``).

Handlers see the request, the client's private data (``ctx.data``, a ``ClientData``, with its
privacy policy ``ctx.policy``) and its state (``ctx.state``), and return a reply. The runtime
enforces the policy around every handler (``HandlerSet.handle``): the family allow-list before,
the privacy audit of the reply after; handlers raise a server's row settings to the policy's
floor with ``ctx.floor`` and refuse small statistics with ``ctx.require_rows``. State values
must be numpy arrays or JSON-compatible values, so every backend can keep them (Flower starts
a new process per message and keeps the state on disk under ``ctx.workdir``); larger models
belong in files under ``ctx.workdir``.
``ctx.memo(key, compute)`` keeps values derived from the client's own data (e.g. encoded
inputs) for later messages of the same process; it is never saved, so a backend that starts a
fresh context per message (Flower) simply computes them again.

Every family's set is served together with the runtime's own handlers (private row
alignment, a shared secret: ``fedpgm.federation.runtime``). Once the parties have agreed on
their common rows (state ``ALIGNED``: positions into the client's training rows, in the agreed
order), every handler sees only those rows in that order.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, TypeVar, cast

import numpy as np

from fedpgm.data.partition import ClientData
from fedpgm.data.policy import ClientPolicy, PolicyRefusal
from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import Contract
from fedpgm.federation.identity import Identity
from fedpgm.federation.privacy import PrivacyAudit

T = TypeVar("T")
Handler = Callable[[Message, "ClientContext"], Message]
JSON_TYPES = (str, int, float, bool, list, dict, type(None))
ALIGNED = "align/rows"  # state: (rows,) int64 positions of the aligned training rows
REQUESTS = "policy/requests"  # state: requests this client has answered in this run
DP_HISTORY = "dp_history"  # state: the DP accountant's steps of this run (fedpgm.concepts.privacy)
KINDS = ("query", "train")  # the kinds of message a handler answers (Flower's message categories)


@dataclass
class ClientContext:
    """What a client handler sees: its client id, its own data (train/test rows, schema), a
    working folder for state kept between messages, and its privacy policy; its identity (signing
    key and the parties' roster) where the deployment gave it one; ``secure``: this request came
    as a share of a secure sum; ``earlier_dp``: the DP accountant's steps its rows served in the
    node's other runs (``fedpgm.federation.spending``; none in-process); ``deployed``: it runs on
    a deployed SuperNode, where the coordinator is another party's."""
    client_id: str
    data: ClientData
    workdir: Path
    state: dict = field(default_factory=dict)
    identity: Identity | None = None
    secure: bool = False
    cache: dict = field(default_factory=dict, repr=False)  # derived values; never saved or sent
    notes: list = field(default_factory=list)  # what the policy changed in this message's request
    earlier_dp: list = field(default_factory=list)  # DP steps this node spent in other runs (``spending``)
    deployed: bool = False  # a SuperNode of a deployment (not in-process, not Flower's simulation)

    @property
    def policy(self) -> ClientPolicy:
        return self.data.policy

    def floor(self, name: str, requested) -> int:
        """``requested`` rows (a server setting such as ``min_instances_slice``) raised to the
        policy's ``min_rows``; the change is noted in the reply."""
        value = max(int(requested), self.policy.min_rows)
        if value != requested:
            self.notes.append(f"{name} raised from {requested} to {value} by the client's policy (min_rows)")
        return value

    def require_rows(self, n: int, what: str) -> None:
        """Refuse to send a statistic of ``what`` computed on fewer than ``min_rows`` rows."""
        if n < self.policy.min_rows:
            raise PolicyRefusal(f"client '{self.client_id}' will not send {what} of {n} rows (its policy's "
                                f"min_rows is {self.policy.min_rows})")

    @property
    def unaligned(self) -> ClientData:
        """The client's data as loaded, before any row alignment."""
        return self.cache.setdefault("unaligned", self.data)

    def align(self) -> None:
        """Restrict ``data`` to the aligned rows in the agreed order (state ``ALIGNED``), if any."""
        base, rows = self.unaligned, self.state.get(ALIGNED)
        self.data = base if rows is None else replace(base, train=base.train.iloc[np.asarray(rows)])

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()`` once per ``key`` while this context lives (``key`` must name every input
        the value depends on besides the client's data)."""
        if key not in self.cache:
            self.cache[key] = compute()
        return cast(T, self.cache[key])

    def check_state(self) -> None:
        for key, value in self.state.items():
            if not isinstance(value, (np.ndarray, *JSON_TYPES)):
                raise FedpgmError(f"client state '{key}' is a {type(value).__name__}; keep arrays or "
                                  "JSON values in state and larger objects in files under workdir")


class HandlerSet:
    """Named handlers of one algorithm; ``kind`` is ``query`` or ``train`` (Flower's types).
    ``warm_up``: run once per process before its first handler, outside the handlers' own timing
    (a client process serves many requests; its one-time library set-up is not a fit's work),
    given a scratch folder inside that client's work folder for any files it writes (removed
    with the work folder if the process is killed)."""

    def __init__(self, name: str, warm_up: Callable[[Path], None] | None = None) -> None:
        self.name = name
        self.handlers: dict[str, tuple[str, Handler, Contract]] = {}
        self.warm_up = warm_up
        self.warm = False  # (per process: each worker imports its own HandlerSet)

    def register(self, kind: str, name: str, contract: Contract) -> Callable[[Handler], Handler]:
        """Register the decorated handler for messages ``name`` whose requests ``contract`` bounds."""
        if not isinstance(contract, Contract):
            raise ValueError(f"handler '{name}' needs a Contract declaring what a server may send it")
        if kind not in KINDS:
            raise ValueError(f"handler kind must be 'query' or 'train', got {kind!r}")
        if not name.isidentifier():
            raise ValueError(f"handler name {name!r} must be a Python identifier")

        def wrap(fn: Handler) -> Handler:
            self.handlers[name] = (kind, fn, contract)
            return fn

        return wrap

    def query(self, name: str, contract: Contract):
        return self.register("query", name, contract)

    def train(self, name: str, contract: Contract):
        return self.register("train", name, contract)

    def kind(self, name: str) -> str:
        return self.lookup(name)[0]

    def lookup(self, name: str) -> tuple[str, Handler, Contract]:
        """The handler of ``name``."""
        found = self.handlers.get(name)
        if found is None:
            raise FedpgmError(f"unknown message '{name}' for handlers '{self.name}' "
                              f"(known: {sorted(self.handlers)})")
        return found

    def routes(self) -> dict[str, str]:
        """Every message name this set answers, with its kind."""
        return {name: kind for name, (kind, _, _) in self.handlers.items()}

    def joined(self, *others: "HandlerSet") -> "HandlerSet":
        """A set of this family (its name, warm-up) answering its own messages and ``others``'."""
        out = HandlerSet(self.name, self.warm_up)
        for part in (self, *others):
            clash = sorted(set(out.handlers) & set(part.handlers))
            if clash:
                raise FedpgmError(f"handlers '{self.name}' and '{part.name}' both answer {clash}")
            out.handlers.update(part.handlers)
        return out

    def handle(self, request: Message, ctx: ClientContext) -> Message:
        """Run the handler under the client's policy: its family allow-list, its per-run request
        budget, its DP and secure-aggregation requirements and the handler's contract first
        (nothing is computed for a request outside them); after, the privacy audit of the reply
        (unless the policy turns it off) and the notes."""
        ctx.policy.check_family(self.name, ctx.client_id)
        _, fn, contract = self.lookup(request.name)
        answered = int(ctx.state.get(REQUESTS, 0))
        if answered >= ctx.policy.max_requests:
            raise PolicyRefusal(f"client '{ctx.client_id}' has answered {answered} requests in this run, its "
                                f"policy's max_requests; start a new run")
        ctx.state[REQUESTS] = answered + 1
        if contract.update and ctx.policy.require_secure_aggregation and not ctx.secure:
            raise PolicyRefusal(f"client '{ctx.client_id}' sends '{request.name}' updates only as shares of a "
                                "secure sum (its policy requires secure aggregation); rerun with --secure-aggregation")
        if contract.sent_model and not contract.dp and ctx.policy.max_epsilon is not None:
            raise PolicyRefusal(f"client '{ctx.client_id}' trains a model it is sent only under differential "
                                f"privacy (its policy's max_epsilon), and '{self.name}' has none; use a family "
                                "that trains under DP (concepts, --dp-epsilon)")
        ctx.notes = []
        ctx.align()
        request = Message(request.name, request.arrays,
                          contract.check(request.name, request.config, request.arrays, ctx))
        if self.warm_up is not None and not self.warm:
            self.warm_up(ctx.workdir / ".warm-up")
            self.warm = True
        reply = fn(request, ctx)
        if not isinstance(reply, Message):
            raise FedpgmError(f"handler '{request.name}' returned {type(reply).__name__}, not a Message")
        ctx.check_state()
        if ctx.policy.audit:
            ctx.memo("privacy-audit", lambda: PrivacyAudit([ctx.unaligned])).check(ctx.client_id, reply, detail=False)
        if ctx.notes:
            reply.config["policy"] = list(ctx.notes)
        return reply


def save_state(state: dict, workdir: Path) -> None:
    """Arrays to ``state.npz`` and the rest to ``state.json``, each replaced atomically."""
    workdir.mkdir(parents=True, exist_ok=True)
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    other = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    for name, write in (("state.npz", lambda f: np.savez(f, **cast(dict[str, Any], arrays))),
                        ("state.json", lambda f: f.write(json.dumps(other).encode()))):
        fd, tmp = tempfile.mkstemp(dir=workdir, prefix=f".{name}.")
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, workdir / name)


def load_state(workdir: Path) -> dict:
    state: dict = {}
    if (workdir / "state.json").is_file():
        state.update(json.loads((workdir / "state.json").read_text()))
    if (workdir / "state.npz").is_file():
        with np.load(workdir / "state.npz", allow_pickle=False) as z:
            state.update({k: z[k] for k in z.files})
    return state

