"""The probabilistic-circuit engine: leaves, structure, compiled evaluation, queries, learners,
and the safetensors + JSON file format.

Names are imported on first use, so that importing the ``pc`` commands (``fedpgm.circuits.cli``)
for ``fedpgm --help`` loads no numpy or torch.
"""

from fedpgm.lazy import exports

_MODULE_OF = {"CompiledCircuit": "compiled", "Circuit": "structure", "Leaf": "structure", "Product": "structure",
              "Sum": "structure", "product_of": "structure", "sum_of": "structure"}
_WHERE = {name: f"fedpgm.circuits.{module}" for name, module in _MODULE_OF.items()}
__all__ = sorted(_WHERE)

__getattr__ = exports(__name__, _WHERE)
