"""fedpgm: federated learning of probabilistic, graphical and interpretable models."""

from fedpgm.errors import FedpgmError

__version__ = "0.1.0"
__all__ = ["FedpgmError", "__version__"]
