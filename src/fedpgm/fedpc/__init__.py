"""Federated probabilistic circuits (FedPC, Seng et al.): one-pass learning across clients.

``fit_fedpc(federation, ...)`` runs Algorithm 1 on any federation backend and returns a
``FedPC`` (``fedpgm.fedpc.model``); ``fedpgm.fedpc.plan`` holds the network side (gluing,
assembly, split evaluation) and ``fedpgm.fedpc.client`` the client handlers.
``FederatedPC`` is the same as a scikit-learn style estimator (``fit(partition)``, ``score``,
``predict``, ``sample``, ``save``/``load``; ``fedpgm.fedpc.estimator``).
``fit_fcdt(federation, ...)`` builds FC[DT] (``fedpgm.fedpc.trees``): each labelled client's
bagged or boosted decision trees under a mean or product root.
"""

from fedpgm.lazy import exports

# imported on first use, so that `fedpgm --help` (which imports fedpgm.fedpc.cli) loads no torch
_WHERE = {"FedPC": "fedpgm.fedpc.model", "fit_fedpc": "fedpgm.fedpc.server", "FederatedPC": "fedpgm.fedpc.estimator",
          "TreeCircuit": "fedpgm.fedpc.trees", "fit_fcdt": "fedpgm.fedpc.trees"}
__all__ = sorted(_WHERE)

__getattr__ = exports(__name__, _WHERE)
