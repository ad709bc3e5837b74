"""Federated neural graphical models (FedNGM): NGMs on mixed data, graph recovery, merged
dependency graphs, global NGMs distilled from client samples, and stitching of client-only
features."""

from fedpgm.lazy import exports

# imported on first use, so that `fedpgm --help` (which imports fedpgm.ngm.cli) loads no torch
_WHERE = {"NGM": "fedpgm.ngm.model", "NGMSettings": "fedpgm.ngm.model", "fit_fedngm": "fedpgm.ngm.server",
          "FederatedNGM": "fedpgm.ngm.estimator"}
__all__ = sorted(_WHERE)

__getattr__ = exports(__name__, _WHERE)
