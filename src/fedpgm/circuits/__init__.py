"""The probabilistic-circuit engine: leaves, structure, compiled evaluation, queries, learners,
and the safetensors + JSON file format."""

from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.structure import Circuit, Leaf, Product, Sum, product_of, sum_of

__all__ = ["Circuit", "CompiledCircuit", "Leaf", "Product", "Sum", "product_of", "sum_of"]
