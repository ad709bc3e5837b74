"""fedpgm: federated learning of probabilistic, graphical and interpretable models."""

from fedpgm.errors import FedpgmError

try:  # one source of the version: the package metadata (pyproject.toml)
    from importlib.metadata import version as _version

    __version__ = _version("fedpgm")
except Exception:  # not installed (a source tree on sys.path)
    __version__ = "unknown"
__all__ = ["FedpgmError", "__version__"]
