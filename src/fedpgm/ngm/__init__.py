"""Federated neural graphical models (FedNGM): NGMs on mixed data, graph recovery, merged
dependency graphs, global NGMs distilled from client samples, and stitching of client-only
features."""

import importlib

# imported on first use, so that `fedpgm --help` (which imports fedpgm.ngm.cli) loads no torch
_WHERE = {"NGM": "fedpgm.ngm.model", "NGMSettings": "fedpgm.ngm.model", "fit_fedngm": "fedpgm.ngm.server",
          "FederatedNGM": "fedpgm.ngm.estimator"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'fedpgm.ngm' has no attribute {name!r}")
