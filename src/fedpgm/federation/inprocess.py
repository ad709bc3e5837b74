"""The in-process backend (the default): simulated clients on this machine.

Each client is an isolated object with its own data, state and work folder, and every
message passes through the codec both ways, so byte counts are real and nothing is shared by
reference. Two modes:

- ``processes`` (default): one worker process per client (forked where the platform can, so
  scripts need no ``__main__`` guard and start-up is fast; else ``forkserver`` or ``spawn``,
  which need the guard; ``start_method`` chooses; torch in a worker uses one thread), at most
  ``max_workers`` requests running at once.
  Timeouts are enforced: a client that overruns is terminated and reported lost; a client
  whose process dies is reported ``unavailable``.
- ``sequential``: clients run one after another in this process, for debugging (timeouts
  cannot interrupt a running handler here).
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import os
import shutil
import tempfile
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from fedpgm.data.partition import ClientData, Partition
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import DEFAULT_TIMEOUT_S, AuditHook, ClientFailure, Federation, Outcome, Payload
from fedpgm.federation.codec import decode, encode
from fedpgm.federation.handlers import ClientContext, HandlerSet
from fedpgm.federation.runtime import load_handlers, serving
from fedpgm.federation.identity import Identity
from fedpgm.federation.lifecycle import guard, watch_parent, worker_signals
from fedpgm.threads import limit_torch

MODES = ("processes", "sequential")


def default_start_method() -> str:
    """``fork`` where the platform has it (Linux), else ``forkserver``, else ``spawn`` (Windows);
    ``forkserver`` also where this process has torch with a GPU: a forked child of a process that
    touched CUDA cannot use it (dense client circuits train on the GPU)."""
    available = mp.get_all_start_methods()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and "forkserver" in available:
        return "forkserver"
    return next(m for m in ("fork", "forkserver", "spawn") if m in available)
OK, FAILED = b"\x00", b"\x01"


def serve_one(handlers: HandlerSet, ctx: ClientContext, request) -> tuple[bytes, Payload]:
    """Decode, handle, encode; returns (status, payload) with the error text on failure. Every
    failure, a request that does not decode (``CodecError``) included, is this client's error
    reply: never a crash of the worker or, in sequential mode, of the run. The text is always
    valid UTF-8 (a request may carry lone surrogates that an error message repeats)."""
    try:
        return OK, encode(handlers.handle(decode(request), ctx))
    except Exception as e:  # the client reports any failure of its handler to the server
        try:
            text = f"{type(e).__name__}: {e}"
        except Exception:  # (an exception whose message cannot be made)
            text = type(e).__name__
        return FAILED, text.encode("utf-8", errors="backslashreplace")


def client_process(conn: Connection, client_id: str, data: ClientData, handlers_path: str,
                   workdir: str, identity: Identity) -> None:
    """Worker loop: one request at a time until the pipe closes or the parent dies (then the
    client's work folder is removed and the worker exits)."""
    worker_signals()
    watch_parent(lambda: remove_workdir(Path(workdir)))
    # A forked child must not enter the parent's OpenMP pools (libgomp is not fork-safe: a child
    # whose parent ran a parallel region hangs in its first one), so every pool runs one thread.
    threadpool_limits(1)
    limit_torch(1)
    handlers = load_handlers(handlers_path)
    ctx = ClientContext(client_id, data, Path(workdir), identity=identity)
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not request:  # the server's shutdown signal
            return
        status, payload = serve_one(handlers, ctx, request)
        try:
            conn.send_bytes(status)
            conn.send_bytes(payload.data if isinstance(payload, np.ndarray) else payload)  # (no copy)
        except (BrokenPipeError, OSError):
            return


def remove_workdir(workdir: Path) -> None:
    """An orphaned worker's clean-up: its own folder, and the federation's if now empty."""
    shutil.rmtree(workdir, ignore_errors=True)
    try:
        workdir.parent.rmdir()
    except OSError:
        pass


class Worker:
    """One client of the in-process backend: a worker process holding that client's data,
    reached through a pipe; it dies with its parent."""
    def __init__(self, ctx, client: ClientData, handlers_path: str, workdir: Path, identity: Identity) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=client_process, daemon=True,
                                   args=(child, client.client_id, client, handlers_path, str(workdir), identity),
                                   name=f"fedpgm-{client.client_id}")
        self.process.start()
        child.close()

    def ask_to_stop(self) -> None:
        # Other (forked) workers may hold copies of this pipe, so closing it is no EOF: say stop.
        try:
            self.conn.send_bytes(b"")
        except (BrokenPipeError, OSError):
            pass
        self.conn.close()

    def stop(self, grace: float = 2.0) -> None:
        self.ask_to_stop()
        stop_all([self], grace)


def stop_all(workers: list[Worker], grace: float = 2.0) -> None:
    """Ask every worker to stop, wait at most ``grace`` seconds in all (a busy worker reads
    the request only when its handler returns), then kill those still running."""
    for w in workers:
        if not w.conn.closed:
            w.ask_to_stop()
    deadline = time.monotonic() + grace
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.process.is_alive():
            w.process.kill()
            w.process.join(grace)


class InProcessFederation(Federation):
    """Clients simulated on this machine.

    ``handlers``: ``"package.module:NAME"`` of a ``HandlerSet`` (a ``HandlerSet`` object is
    accepted in ``sequential`` mode). ``audit``: a hook called with (client, reply) for every
    reply, e.g. ``PrivacyAudit(partition)``. ``timeout``: seconds per exchange (None: none).
    ``start_method``: how worker processes start (``multiprocessing``'s fork, forkserver or
    spawn; default ``default_start_method()``).
    """

    def __init__(self, clients: Sequence[ClientData] | Partition, handlers: str | HandlerSet,
                 mode: str = "processes", max_workers: int | None = None,
                 workdir: str | Path | None = None, audit: AuditHook | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S, start_method: str | None = None) -> None:
        start_method = start_method or default_start_method()
        if start_method not in mp.get_all_start_methods():
            raise FedpgmError(f"start method '{start_method}' is not available here; use one of "
                              f"{', '.join(mp.get_all_start_methods())}")
        clients = list(clients.clients if isinstance(clients, Partition) else clients)
        if not clients:
            raise FedpgmError("a federation needs at least one client")
        ids = [c.client_id for c in clients]
        if len(set(ids)) != len(ids):
            raise FedpgmError(f"client ids must be unique, got {ids}")
        if mode not in MODES:
            raise FedpgmError(f"unknown mode '{mode}'; use one of {MODES}")
        super().__init__(ids, audit, timeout)
        self.mode = mode
        self.max_workers = max(1, max_workers or os.cpu_count() or 1)
        if mode == "sequential":
            handler_set = load_handlers(handlers) if isinstance(handlers, str) else serving(handlers)
        elif not isinstance(handlers, str):
            raise FedpgmError("processes mode needs handlers as 'package.module:NAME'")
        else:
            load_handlers(handlers)  # fail here, before any folder or worker, not in every worker
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="fedpgm-clients-") if workdir is None else workdir)
        if self._own_workdir:  # removed by the reaper too if this process dies without close()
            guard().add_path(self.workdir)
        self.workers: dict[str, Worker] = {}
        try:
            dirs = {c.client_id: self.workdir / c.client_id for c in clients}
            identities = Identity.generate(ids)  # one operator plays every party: it makes the roster
            for d in dirs.values():
                d.mkdir(parents=True, exist_ok=True)
            if mode == "sequential":
                self.handlers = handler_set
                self.contexts = {c.client_id: ClientContext(c.client_id, c, dirs[c.client_id],
                                                            identity=identities[c.client_id])
                                 for c in clients}
            else:
                ctx = mp.get_context(start_method)
                assert isinstance(handlers, str)  # (checked above: workers import the handlers by path)
                for c in clients:
                    self.workers[c.client_id] = Worker(ctx, c, handlers, dirs[c.client_id], identities[c.client_id])
        except BaseException:  # a half-built federation stops what it started and removes its folder
            self.close()
            raise

    def _exchange(self, requests, names, timeout) -> dict[str, Outcome]:
        if self.mode == "sequential":
            out: dict[str, Outcome] = {}
            for c, data in requests.items():
                status, payload = serve_one(self.handlers, self.contexts[c], data)
                out[c] = payload if status == OK else ClientFailure(c, names[c], "error", bytes(payload).decode())
            return out
        return self._exchange_processes(requests, names, timeout)

    def _exchange_processes(self, requests, names, timeout) -> dict[str, Outcome]:
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = list(requests)
        running: dict[Connection, str] = {}
        results: dict[str, Outcome] = {}
        while pending or running:
            while pending and len(running) < self.max_workers:
                c = pending.pop(0)
                worker = self.workers[c]
                try:
                    worker.conn.send_bytes(requests[c])
                    running[worker.conn] = c
                except (BrokenPipeError, OSError):
                    results[c] = ClientFailure(c, names[c], "unavailable", "client process is gone")
            if not running:
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(list(running), timeout=left)
            if not ready:  # the deadline passed
                for c in running.values():
                    results[c] = ClientFailure(c, names[c], "timeout", f"no reply within {timeout} s")
                    self.workers[c].stop(grace=0.1)
                for c in pending:
                    results[c] = ClientFailure(c, names[c], "timeout", f"not started within {timeout} s")
                break
            for conn in ready:
                assert isinstance(conn, Connection)  # (wait returns what it was given)
                c = running.pop(conn)
                try:
                    status, payload = conn.recv_bytes(), conn.recv_bytes()
                except (EOFError, OSError):
                    code = self.workers[c].process.exitcode
                    results[c] = ClientFailure(c, names[c], "unavailable",
                                               f"client process exited (code {code})")
                    continue
                results[c] = (payload if status == OK else
                              ClientFailure(c, names[c], "error", payload.decode()))
        return results

    def kill(self, client: str) -> None:
        """Stop one client's process abruptly (for failure tests and drills)."""
        self.workers[client].process.kill()
        self.workers[client].process.join(5)

    def close(self) -> None:
        stop_all(list(self.workers.values()))
        self.workers = {}
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            guard().forget_path(self.workdir)
