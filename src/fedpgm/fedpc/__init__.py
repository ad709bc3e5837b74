"""Federated probabilistic circuits (FedPC, Seng et al.): one-pass learning across clients.

``fit_fedpc(federation, ...)`` runs Algorithm 1 on any federation backend and returns a
``FedPC`` (``fedpgm.fedpc.model``); ``fedpgm.fedpc.plan`` holds the network side (gluing,
assembly, split evaluation) and ``fedpgm.fedpc.client`` the client handlers.
``fit_fcdt(federation, ...)`` builds FC[DT] (``fedpgm.fedpc.trees``): each labelled client's
bagged or boosted decision trees under a mean or product root.
"""

from fedpgm.fedpc.model import FedPC
from fedpgm.fedpc.server import fit_fedpc
from fedpgm.fedpc.trees import TreeCircuit, fit_fcdt

__all__ = ["FedPC", "TreeCircuit", "fit_fcdt", "fit_fedpc"]
