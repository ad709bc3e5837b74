"""Server side: the federation handle every algorithm talks to, whatever the backend.

``broadcast`` sends one request per client (concurrently where the backend can) and returns
``Replies``: the decoded messages of the clients that answered and a typed ``ClientFailure``
for each that did not (it raised, timed out, disappeared or sent undecodable bytes). Every
exchange has a deadline (``timeout``, default the federation's ``timeout``); a client reported
``unavailable`` is asked once more (a node that comes back within the deadline answers). The
algorithm decides whether to go on: ``replies.require_all()`` raises ``ClientFailed`` naming the
clients; ``replies.require(quorum)`` goes on with those that answered if at least ``quorum``
did, and the federation records the others in ``left_out`` for the report.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from fedpgm.errors import FedpgmError
from fedpgm.federation.codec import CodecError, Message, decode, encode
from fedpgm.federation.ledger import Ledger

FAILURE_KINDS = ("error", "timeout", "unavailable", "decode")
DEFAULT_TIMEOUT_S = 3600.0  # per exchange; runs set their own (``--timeout`` on the CLI)
logger = logging.getLogger("fedpgm.federation")


@dataclass(frozen=True)
class ClientFailure:
    """Why one client gave no reply to one message."""

    client: str
    message: str
    kind: str  # one of FAILURE_KINDS
    detail: str

    def __str__(self) -> str:
        return f"client '{self.client}' failed on '{self.message}' ({self.kind}): {self.detail}"


class ClientFailed(FedpgmError):
    """Raised by ``Replies.require_all`` when clients failed; ``failures`` lists them."""

    def __init__(self, failures: list[ClientFailure]) -> None:
        self.failures = failures
        super().__init__("; ".join(str(f) for f in failures))


@dataclass
class Replies:
    """The answers to one broadcast: messages from the clients that answered, failures of those
    that did not, and (with a quorum) the clients left out."""
    messages: dict[str, Message] = field(default_factory=dict)
    failures: dict[str, ClientFailure] = field(default_factory=dict)
    left_out: dict[str, ClientFailure] | None = None  # the federation's record (see ``require``)

    def require_all(self) -> dict[str, Message]:
        if self.failures:
            raise ClientFailed(list(self.failures.values()))
        return self.messages

    def require(self, quorum: int | None) -> dict[str, Message]:
        """The replies if at least ``quorum`` clients answered (``None``: all of them); the
        clients that did not are recorded as left out. Otherwise ``ClientFailed``."""
        if quorum is None or len(self.messages) < quorum:
            return self.require_all()
        if self.left_out is not None:
            self.left_out.update(self.failures)
        return self.messages

    def __getitem__(self, client: str) -> Message:
        if client in self.failures:
            raise ClientFailed([self.failures[client]])
        return self.messages[client]


Payload = bytes | bytearray | np.ndarray  # codec bytes (encode returns a uint8 array)
Outcome = Payload | ClientFailure
AuditHook = Callable[[str, Message], None]


class Federation(ABC):
    """A handle on K clients. Subclasses implement ``_exchange`` (bytes in, bytes out)."""

    def __init__(self, client_ids: Iterable[str], audit: AuditHook | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        self._clients = list(client_ids)
        self.ledger = Ledger()
        self.audit = audit
        self.timeout = timeout
        self.lost: dict[str, ClientFailure] = {}  # clients that are gone for good
        self.left_out: dict[str, ClientFailure] = {}  # clients a quorum went on without

    def left_out_report(self) -> dict[str, str]:
        """Who a quorum left out and why, for a run's report."""
        return {c: f"{f.kind} on '{f.message}': {f.detail}" for c, f in self.left_out.items()}

    @property
    def clients(self) -> list[str]:
        """The clients still reachable (lost ones are dropped)."""
        return [c for c in self._clients if c not in self.lost]

    @abstractmethod
    def _exchange(self, requests: dict[str, Payload], names: dict[str, str],
                  timeout: float | None) -> dict[str, Outcome]:
        """Deliver each client's request bytes; return reply bytes or a failure per client."""

    def admit(self, clients: list[str], wait_s: float | None = None) -> None:
        """Make sure ``clients`` are reachable before addressing them for the first time.
        Backends whose clients connect late (Flower) wait for them; here they must exist."""
        unknown = [c for c in clients if c not in self._clients]
        if unknown:
            raise FedpgmError(f"unknown client(s) {unknown}; the federation has {self._clients}")

    def await_return(self, clients: list[str], deadline: float | None) -> None:
        """Before a retry: wait (until ``deadline``, a ``time.monotonic`` value) for unavailable
        clients to be reachable again. Here a dead client cannot come back, so no wait."""
        return None

    def secure_sum(self, name: str, order: list[str],
                   requests: dict[str, tuple[dict, dict]]) -> tuple[list[np.ndarray], dict[str, dict]]:
        """The sum of the clients' ``name`` reply arrays (in ``order``) without the server seeing
        any one of them, and each survivor's reply config (``fedpgm.federation.secagg``)."""
        raise FedpgmError("secure aggregation (Flower's SecAgg+) needs separate parties holding their own "
                          "keys: it runs on the Flower backend only; use --backend flower, or run without "
                          "--secure-aggregation in-process")

    def close(self) -> None:
        """Release processes or connections (idempotent)."""
        return None

    def log(self, text: str) -> None:
        """Progress of a server procedure (streamed by ``flwr run``; logged in-process)."""
        logger.info("%s", text)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, client: str, name: str, arrays: dict[str, np.ndarray] | None = None,
             config: dict | None = None, timeout: float | None = None) -> Replies:
        return self.broadcast(name, arrays, config, clients=[client], timeout=timeout)

    def broadcast(self, name: str, arrays: dict[str, np.ndarray] | None = None,
                  config: dict | None = None, clients: Iterable[str] | None = None,
                  timeout: float | None = None,
                  per_client: dict[str, tuple[dict, dict]] | None = None) -> Replies:
        """Send ``name`` to ``clients`` (default: all reachable) in one round.

        ``per_client[c] = (arrays, config)`` overrides the payload for client ``c``; ``timeout``
        (seconds, default ``self.timeout``) bounds the whole exchange.
        """
        targets = list(self.clients if clients is None else clients)
        unknown = [c for c in targets if c not in self._clients]
        if unknown:
            raise FedpgmError(f"unknown client(s) {unknown}; the federation has {self._clients}")
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        replies = Replies(left_out=self.left_out)
        self.ledger.new_round()
        self.log(f"round {self.ledger.rounds}: '{name}' to {len(targets)} client(s)")
        requests: dict[str, Payload] = {}
        for c in targets:
            if c in self.lost:
                replies.failures[c] = ClientFailure(c, name, "unavailable",
                                                    f"lost earlier: {self.lost[c].detail}")
                continue
            a, cfg = (per_client or {}).get(c, (arrays or {}, config or {}))
            data = encode(Message(name, a, cfg))
            self.ledger.record("down", c, name, len(data))
            requests[c] = data
        outcomes = self._exchange(requests, {c: name for c in requests}, timeout)
        again = {c: requests[c] for c, o in outcomes.items()
                 if isinstance(o, ClientFailure) and o.kind == "unavailable"}
        left = None if deadline is None else deadline - time.monotonic()
        if again and (left is None or left > 0):  # one retry: a node that came back answers
            self.log(f"asking {sorted(again)} once more after: "
                     + "; ".join(str(outcomes[c]) for c in again))
            self.await_return(list(again), deadline)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            for c, request in again.items():
                self.ledger.record("down", c, name, len(request))
            for c, out in self._exchange(again, {c: name for c in again}, left).items():
                first = outcomes[c]
                before = first.detail if isinstance(first, ClientFailure) else ""
                outcomes[c] = out if not isinstance(out, ClientFailure) else ClientFailure(
                    c, name, out.kind, f"{before}; asked again: {out.detail}")
        for c in requests:
            out = outcomes.get(c, ClientFailure(c, name, "unavailable", "no reply"))
            if isinstance(out, ClientFailure):
                replies.failures[c] = out
                if out.kind in ("timeout", "unavailable"):
                    self.lost[c] = out
                continue
            self.ledger.record("up", c, name, len(out))
            try:
                msg = decode(out)
            except CodecError as e:
                replies.failures[c] = ClientFailure(c, name, "decode", str(e))
                continue
            if self.audit is not None:
                self.audit(c, msg)
            replies.messages[c] = msg
        return replies
