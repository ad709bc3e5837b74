"""Federated probabilistic circuits (FedPC, Seng et al.): one-pass learning across clients.

``fit_fedpc(federation, ...)`` runs Algorithm 1 on any federation backend and returns a
``FedPC`` (``fedpgm.fedpc.model``); ``fedpgm.fedpc.plan`` holds the network side (gluing,
assembly, split evaluation) and ``fedpgm.fedpc.client`` the client handlers.
"""

from fedpgm.fedpc.model import FedPC
from fedpgm.fedpc.server import fit_fedpc

__all__ = ["FedPC", "fit_fedpc"]
