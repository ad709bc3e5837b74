"""The three kinds of node of a symbolic circuit (``fedpgm.circuits.structure.Circuit``): leaves,
sums and products, referring to their children by node id."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Leaf:
    """A univariate distribution over the schema's variable ``var``, of a registered leaf type."""
    var: int  # index into the schema's features
    dist: str  # a registered leaf type
    params: dict[str, np.ndarray]


@dataclass
class Sum:
    """A mixture of its children (node ids), with weights that sum to 1."""
    children: list[int]
    weights: np.ndarray  # (len(children),), sums to 1


@dataclass
class Product:
    """A factorisation: the product of its children, which have disjoint scopes."""
    children: list[int]


Node = Leaf | Sum | Product
