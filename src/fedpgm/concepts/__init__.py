"""Federated concept-based models (F-CMs): concept data from Bayesian networks, concept models
(CBM, CEM, CGM, C2BM, opaque) whose concept set and graph grow as clients join, graph aggregation,
module-wise FedAvg, interventions and DP-SGD client updates."""

from fedpgm.lazy import exports

# imported on first use, so that `fedpgm --help` (which imports fedpgm.concepts.cli) loads no torch
_WHERE = {"FederatedCM": "fedpgm.concepts.estimator", "ConceptModel": "fedpgm.concepts.models",
          "make_concept_data": "fedpgm.concepts.data", "federation_of": "fedpgm.concepts.experiment",
          "run_fcm": "fedpgm.concepts.experiment"}
__all__ = sorted(_WHERE)

__getattr__ = exports(__name__, _WHERE)
