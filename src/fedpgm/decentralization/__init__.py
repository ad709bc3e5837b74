"""The cost of decentralization in vertical federations: exact Bayesian predictive losses of
collaborative vs decentralized learning and inference, under privacy constraints.

Names are imported on first use, so that importing the commands (``fedpgm.decentralization.cli``)
for ``fedpgm --help`` loads no numpy.
"""

from fedpgm.lazy import exports

_MODULE_OF = {"SCHEMES": "engine", "conditional_entropy": "engine", "leakage": "engine", "losses": "engine",
              "Channel": "model", "DiscreteModel": "model", "identity_channel": "model", "xor_channel": "model"}
_WHERE = {name: f"fedpgm.decentralization.{module}" for name, module in _MODULE_OF.items()}
__all__ = sorted(_WHERE)

__getattr__ = exports(__name__, _WHERE)
