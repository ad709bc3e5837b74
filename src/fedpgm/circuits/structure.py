"""Symbolic circuits: leaves, sums and products over the variables of a schema.

A ``Circuit`` is a list of nodes in topological order (children before parents; the last node
is the root) plus the ``Schema`` whose features are its variables. It says *what* the circuit
is; ``fedpgm.circuits.compiled`` turns it into tensor layers that evaluate it.

Validity (``Circuit.validate``): every sum is smooth (children share one scope), every product
is decomposable (children have disjoint scopes), sum weights are a distribution, leaves fit
their variable's kind; an error names the offending node. Circuits compose: ``sum_of`` mixes
circuits with the same scope, ``product_of`` joins circuits with disjoint scopes (FedPC builds
exactly these).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Sequence

import numpy as np

from fedpgm.circuits import queries
from fedpgm.circuits.compiled import CompiledCircuit
from fedpgm.circuits.leaves import leaf_type
from fedpgm.circuits.nodes import Leaf, Node, Product, Sum
from fedpgm.circuits.semiring import Semiring
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError


@dataclass
class Circuit:
    """A symbolic circuit over ``schema``: nodes in topological order (children before parents),
    the last node the root. Compile it (``CompiledCircuit``) to evaluate it."""
    schema: Schema
    nodes: list[Node] = field(default_factory=list)
    dense: ClassVar[Literal[False]] = False  # (``DenseCircuit``'s is True)
    format: ClassVar[str] = "fedpgm-circuit/1"  # (``fedpgm.circuits.io.FORMATS``)

    # -- building -------------------------------------------------------------------------
    def add(self, node: Node) -> int:
        """Append a node (its children must already be in) and return its id."""
        for c in getattr(node, "children", []):
            if not 0 <= c < len(self.nodes):
                raise FedpgmError(f"node {len(self.nodes)} refers to child {c}, which does not exist yet")
        self.nodes.append(node)
        return len(self.nodes) - 1

    def leaf(self, var: int, dist: str, params: dict) -> int:
        return self.add(Leaf(int(var), dist, {k: np.asarray(v, dtype=float) for k, v in params.items()}))

    def sum(self, children: Sequence[int], weights: Sequence[float] | np.ndarray) -> int:
        return self.add(Sum([int(c) for c in children], np.asarray(weights, dtype=float)))

    def product(self, children: Sequence[int]) -> int:
        return self.add(Product([int(c) for c in children]))

    @property
    def root(self) -> int:
        if not self.nodes:
            raise FedpgmError("the circuit is empty")
        return len(self.nodes) - 1

    # -- the circuit model protocol (``fedpgm.circuits.protocol``): compiled afresh per call ----
    @property
    def width(self) -> int:
        return len(self.schema)

    def log_likelihood(self, X: np.ndarray) -> np.ndarray:
        """(rows,) log p(observed values) of X (rows, variables), NaN marginalised."""
        return queries.log_likelihood(CompiledCircuit(self), X)

    def complete(self, X: np.ndarray, how: Semiring | str = Semiring.MAX, seed: int = 0) -> np.ndarray:
        """(rows, variables) X with NaN filled: the exact MPE (``MAX``) or a conditional draw (``SUM``)."""
        cc = CompiledCircuit(self)
        if Semiring.of(how) is Semiring.MAX:
            return queries.mpe(cc, X)
        return queries.sample(cc, evidence=X, seed=seed)

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """(n, variables) exact unconditional draws."""
        return queries.sample(CompiledCircuit(self), n, seed=seed)

    # -- properties -----------------------------------------------------------------------
    def scopes(self) -> list[frozenset[int]]:
        out: list[frozenset[int]] = []
        for node in self.nodes:
            if isinstance(node, Leaf):
                out.append(frozenset([node.var]))
            else:
                out.append(frozenset().union(*(out[c] for c in node.children)))
        return out

    @property
    def scope(self) -> frozenset[int]:
        return self.scopes()[self.root]

    @property
    def scope_names(self) -> list[str]:
        return [self.schema.features[i].name for i in sorted(self.scope)]

    def stats(self) -> dict[str, int]:
        """Node, edge and parameter counts."""
        sums = [n for n in self.nodes if isinstance(n, Sum)]
        prods = [n for n in self.nodes if isinstance(n, Product)]
        leaves = [n for n in self.nodes if isinstance(n, Leaf)]
        return {"n_nodes": len(self.nodes), "n_sums": len(sums), "n_products": len(prods),
                "n_leaves": len(leaves),
                "n_edges": sum(len(n.children) for n in sums + prods),
                "n_params": sum(len(n.weights) for n in sums)
                + sum(int(np.size(v)) for n in leaves for v in n.params.values())}

    def validate(self) -> None:
        """Smoothness, decomposability, weights, leaf kinds; errors name the node."""
        scopes = self.scopes()
        reachable = set()
        stack = [self.root]
        while stack:
            i = stack.pop()
            if i not in reachable:
                reachable.add(i)
                stack.extend(getattr(self.nodes[i], "children", []))
        for i, node in enumerate(self.nodes):
            where = f"node {i} ({type(node).__name__.lower()})"
            if isinstance(node, Leaf):
                if not 0 <= node.var < len(self.schema):
                    raise FedpgmError(f"{where} uses variable {node.var}, not in the schema")
                feat = self.schema.features[node.var]
                kind = leaf_type(node.dist)
                if feat.kind not in kind.kinds:
                    raise FedpgmError(f"{where}: a {node.dist} leaf cannot model {feat.kind} "
                                      f"variable '{feat.name}' (it models {', '.join(kind.kinds)})")
                try:
                    kind.check(node.params)
                except (ValueError, KeyError) as e:
                    raise FedpgmError(f"{where} on '{feat.name}': invalid parameters ({e})") from None
                states = len(kind.probabilities(node.params)) if "continuous" not in kind.kinds else None
                if states is not None and states != feat.cardinality:
                    raise FedpgmError(f"{where} on '{feat.name}' has {states} "
                                      f"states; the variable has {feat.cardinality}")
                continue
            if not node.children:
                raise FedpgmError(f"{where} has no children")
            if any(c >= i for c in node.children):
                raise FedpgmError(f"{where} has a child that is not before it (cycle or bad order)")
            if isinstance(node, Sum):
                w = node.weights
                if len(w) != len(node.children) or not (w >= 0).all() or not abs(w.sum() - 1) <= 1e-6:
                    raise FedpgmError(f"{where}: weights must be >= 0, one per child, summing to 1 "
                                      f"(got {np.round(w, 6).tolist()})")
                first = scopes[node.children[0]]
                for c in node.children[1:]:
                    if scopes[c] != first:
                        raise FedpgmError(f"{where} is not smooth: child {node.children[0]} has scope "
                                          f"{sorted(first)}, child {c} has {sorted(scopes[c])}")
            else:
                seen: set[int] = set()
                for c in node.children:
                    if seen & scopes[c]:
                        raise FedpgmError(f"{where} is not decomposable: child {c} repeats variables "
                                          f"{sorted(seen & scopes[c])}")
                    seen |= scopes[c]
        unused = len(self.nodes) - len(reachable)
        if unused:
            raise FedpgmError(f"{unused} node(s) are not reachable from the root (node {self.root})")


# -- composition ------------------------------------------------------------------------------
def copy_into(target: Circuit, source: Circuit, var_map: dict[int, int]) -> int:
    """Append ``source``'s nodes to ``target`` (variables renumbered); returns the new root id."""
    offset = len(target.nodes)
    for node in source.nodes:
        if isinstance(node, Leaf):
            target.nodes.append(Leaf(var_map[node.var], node.dist, dict(node.params)))
        elif isinstance(node, Sum):
            target.nodes.append(Sum([c + offset for c in node.children], node.weights.copy()))
        else:
            target.nodes.append(Product([c + offset for c in node.children]))
    return len(target.nodes) - 1


def var_map_into(schema: Schema, part: Circuit) -> dict[int, int]:
    """Map a part's variable indices to ``schema``'s by feature name (types must agree)."""
    out = {}
    for i, f in enumerate(part.schema.features):
        if f.name not in schema:
            continue
        if schema[f.name].kind != f.kind or schema[f.name].categories != f.categories:
            raise FedpgmError(f"variable '{f.name}' has different types in the circuits being joined")
        out[i] = schema.index(f.name)
    return out


def combine(parts: Sequence[Circuit], schema: Schema | None, root: Literal["sum", "product"],
            weights: Sequence[float] | None = None) -> Circuit:
    """One circuit whose ``root`` node (a sum: a mixture with ``weights``; a product) joins copies
    of ``parts`` over ``schema`` (default: the parts' variables in order of appearance)."""
    if not parts:
        raise FedpgmError(f"a {root} needs at least one circuit")
    if schema is None:
        feats, seen = [], set()
        for p in parts:
            for f in p.schema.features:
                if f.name not in seen:
                    seen.add(f.name)
                    feats.append(f)
        labels = {p.schema.label for p in parts if p.schema.label is not None}
        schema = Schema(tuple(feats), labels.pop() if len(labels) == 1 else None)
    out = Circuit(schema)
    roots = [copy_into(out, p, var_map_into(schema, p)) for p in parts]
    if root == "sum":
        w = np.asarray(weights if weights is not None else np.ones(len(parts)), dtype=float)
        if len(w) != len(parts) or (w < 0).any() or w.sum() <= 0:
            raise FedpgmError("mixture weights must be one non-negative number per circuit")
        out.sum(roots, w / w.sum())
    else:
        out.product(roots)
    out.validate()
    return out


def sum_of(parts: Sequence[Circuit], weights: Sequence[float] | None = None,
           schema: Schema | None = None) -> Circuit:
    """A mixture of circuits over the same scope (weights normalised)."""
    return combine(parts, schema, "sum", weights)


def product_of(parts: Sequence[Circuit], schema: Schema | None = None) -> Circuit:
    """A product of circuits over disjoint scopes."""
    return combine(parts, schema, "product")
