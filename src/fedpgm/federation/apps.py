"""What a Flower run may execute, by name: client handler families and server procedures.

A Flower run config names a family (``handlers = "fedpc"``) and a procedure (``procedure =
"fedpc"``), never a Python import path: a SuperNode imports only the handler sets listed here,
and its operator narrows them further with the node's policy (``families``). A run that names
anything else is refused with the list of what exists. In-process federations take any
``HandlerSet`` (``fedpgm.federation.runtime.load_handlers``), since the caller runs them all.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fedpgm.errors import FedpgmError

def app_dir() -> Path:
    """The Flower app (``pyproject.toml`` naming the ServerApp and ClientApp) that ``flwr run``
    builds and signs."""
    return Path(str(files("fedpgm.federation") / "flower_app"))


# family -> the HandlerSet a SuperNode serves for it
HANDLERS = {
    "moments": "fedpgm.federation.reference:HANDLERS",
    "diagnostics": "fedpgm.federation.diagnostics:HANDLERS",
    "fedpc": "fedpgm.fedpc.client:HANDLERS",
    "ngm": "fedpgm.ngm.client:HANDLERS",
    "concepts": "fedpgm.concepts.federation:HANDLERS",
    "naive_bayes": "fedpgm.naive_bayes:HANDLERS",  # the worked example of docs/extending.md
}
# procedure -> the server function ``procedure(federation, **args) -> dict``
PROCEDURES = {
    "moments": "fedpgm.federation.reference:federated_moments",
    "fedpc": "fedpgm.fedpc.procedure:server_procedure",
    "ngm": "fedpgm.ngm.experiment:server_procedure",
    "concepts": "fedpgm.concepts.experiment:server_procedure",
    "naive_bayes": "fedpgm.naive_bayes:fit_naive_bayes",
    "roundtrip": "fedpgm.federation.diagnostics:roundtrip_benchmark",
    "secure-sum-probe": "fedpgm.federation.diagnostics:secure_sum_probe",
}


def name_of(value: str, registry: dict[str, str], what: str) -> str:
    """The registered name of ``value`` (a name, or the import path registered under one)."""
    if value in registry:
        return value
    for name, path in registry.items():
        if path == value:
            return name
    raise FedpgmError(f"{what} '{value}' cannot run on Flower; use one of {', '.join(registry)}")


def handlers_path(family: str) -> str:
    """Import path of a family's handlers; a name outside ``HANDLERS`` is refused."""
    return HANDLERS[name_of(family, {k: k for k in HANDLERS}, "handler family")]


def procedure_path(name: str) -> str:
    """Import path of a registered procedure; any other name is refused."""
    return PROCEDURES[name_of(name, {k: k for k in PROCEDURES}, "procedure")]


# where a federation runs: this process's workers, a loopback Flower deployment (SuperLink and
# one SuperNode per client), or Flower's Simulation Runtime (Ray; ``fedpgm[simulation]``)
BACKENDS = ("inprocess", "flower", "simulation")
BACKEND_HELP = "inprocess, flower (a loopback deployment) or simulation (Flower's Simulation Runtime)"


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise FedpgmError(f"unknown backend '{backend}'; use {', '.join(BACKENDS)}")
    return backend
