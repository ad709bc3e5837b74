"""One runner for every family: ``run`` calls a server procedure across a partition's clients on
a backend, and is the only code that knows the backends (``apps.BACKENDS``):

- ``inprocess``: this machine's worker processes (``InProcessFederation``), one per client;
- ``flower``: a loopback Flower deployment, a SuperLink and one SuperNode per client
  (``LoopbackDeployment``);
- ``simulation``: Flower's Simulation Runtime.

A procedure is ``procedure(federation, **args) -> dict`` (registered in ``apps.PROCEDURES``) and
the clients serve a family's handlers (``apps.HANDLERS``). On Flower the procedure runs in the
ServerApp's process, so a procedure that makes a model saves it to a folder named in ``args``
and returns JSON; the caller reads the same result, and loads the same files, on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from fedpgm.data.partition import Partition
from fedpgm.data.policy import ClientPolicy
from fedpgm.errors import FedpgmError
from fedpgm.federation.apps import check_backend, handlers_path, procedure_path
from fedpgm.federation.base import DEFAULT_TIMEOUT_S, AuditHook


def run(partition: Partition, family: str, procedure: str, args: dict | None = None, *,
        backend: str = "inprocess", timeout: float | None = DEFAULT_TIMEOUT_S, late: Sequence[str] = (),
        mode: str = "processes", audit: AuditHook | None = None, progress: Callable | None = None) -> dict:
    """``procedure(federation, **args)`` with ``partition``'s clients serving ``family``'s handlers
    on ``backend``; its result with the run's ``communication`` totals.

    ``timeout``: seconds per exchange with the clients (the whole run gets four times as long, at
    least an hour); ``late``: clients that join later, whom the procedure addresses only after it
    waits for them (their SuperNodes start when it does); ``mode`` and ``audit``: the in-process
    federation's (``InProcessFederation``); a Flower client audits its own replies; ``progress``:
    passed to the procedure in-process (a Flower run's progress is the ServerApp's log)."""
    check_backend(backend)
    unknown = sorted(set(late) - {c.client_id for c in partition.clients})
    if unknown:
        raise FedpgmError(f"late clients {unknown} are not in the federation; its clients are "
                          f"{[c.client_id for c in partition.clients]}")
    if backend == "inprocess":
        from fedpgm.federation.flower import run_procedure
        from fedpgm.federation.inprocess import InProcessFederation

        with InProcessFederation(partition, handlers_path(family), mode=mode, audit=audit, timeout=timeout) as fed:
            return run_procedure(fed, procedure_path(procedure), {**(args or {}), **({"progress": progress}
                                                                                      if progress else {})})
    return run_on_flower(partition, family, procedure, args or {}, timeout or DEFAULT_TIMEOUT_S, list(late),
                         simulation=backend == "simulation")


def run_on_flower(partition: Partition, family: str, procedure: str, args: dict, timeout: float,
                  late: list[str], simulation: bool) -> dict:
    """``run`` on a loopback deployment of ``partition`` (written to a private folder); each
    SuperNode holds its client's CSV and its own policy (``ClientData.policy``)."""
    from fedpgm.federation.deploy import LoopbackDeployment
    from fedpgm.federation.lifecycle import private_tempdir

    ids = [c.client_id for c in partition.clients]
    initial = [c for c in ids if c not in late]
    policies = {c.client_id: c.policy for c in partition.clients if c.policy != ClientPolicy()}
    with private_tempdir("fedpgm-run-") as tmp:
        partition.write(Path(tmp) / "partition")
        with LoopbackDeployment(Path(tmp) / "partition", workdir=Path(tmp) / "flower",
                                clients=None if simulation else initial, simulation=simulation,
                                policies=policies) as dep:
            whole = max(3600.0, 4 * timeout)
            submitted = dep.submit(procedure, family, args, clients=len(initial), timeout=whole,
                                   exchange_timeout=timeout)
            if late and not simulation:  # (the Simulation Runtime runs every node from the start)
                submitted.wait_for("waiting for clients", timeout=whole)
                for client in late:
                    dep.start_node(client)
            return submitted.result(whole)

