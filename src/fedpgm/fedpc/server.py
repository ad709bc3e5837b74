"""FedPC server: Algorithm 1 (one-pass training) of Seng et al., on any federation backend.

1. ``describe``: each client's feature names and row count (never data); the client-by-feature
   indicator matrix M; features with identical columns of M form disjoint subspaces S(j) held by
   client sets O(j).
2. A subspace held by several clients becomes a sum over their circuits, weighted by row counts.
3. A subspace held by one client: that client clusters its rows (on its own columns) into K
   clusters and learns one circuit per cluster.
4. P products, each with every shared sum and, per single-client subspace, one cluster circuit
   drawn at random (every cluster used at least once), so each product spans all features.
5. A root sum over the products with weights rho = the summed training sizes of each product's
   children, normalised: no forward or backward pass.
"""

from __future__ import annotations

import numpy as np

from fedpgm.circuits.io import from_payload
from fedpgm.circuits.structure import Circuit, product_of, sum_of
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation.base import Federation


def global_schema(schemas: dict[str, Schema]) -> Schema:
    """The union of the clients' features; a name held with different types is an error."""
    feats, seen = [], {}
    for client, schema in schemas.items():
        for f in schema.features:
            if f.name in seen and seen[f.name][0] != f:
                raise FedpgmError(f"feature '{f.name}' has different types at clients "
                                  f"'{seen[f.name][1]}' and '{client}'; align the schemas")
            if f.name not in seen:
                seen[f.name] = (f, client)
                feats.append(f)
    labels = {s.label for s in schemas.values() if s.label is not None}
    return Schema(tuple(feats), labels.pop() if len(labels) == 1 else None)


def subspaces(schemas: dict[str, Schema], schema: Schema) -> list[tuple[list[str], list[str]]]:
    """(feature names, holding clients) per group of identical columns of M, in feature order."""
    groups: dict[tuple, list[str]] = {}
    for name in schema.names:
        holders = tuple(c for c, s in schemas.items() if name in s)
        groups.setdefault(holders, []).append(name)
    return [(names, list(holders)) for holders, names in groups.items()]


def fit_fedpc(fed: Federation, clusters: int = 2, products: int | None = None, seed: int = 0,
              min_instances_slice: int = 100, threshold: float = 0.3, leaf: str = "gaussian") -> dict:
    """Learn a federated circuit in one pass; returns {"circuit", "subspaces", "communication"}."""
    if clusters < 1:
        raise FedpgmError(f"clusters must be >= 1, got {clusters}")
    described = fed.broadcast("describe").require_all()
    schemas = {c: Schema.from_dict(m.config["schema"]) for c, m in described.items()}
    sizes = {c: int(m.config["n_rows"]) for c, m in described.items()}
    empty = [c for c, n in sizes.items() if n == 0]
    if empty:
        raise FedpgmError(f"client(s) {empty} have no rows; leave them out of the federation")
    schema = global_schema(schemas)
    spaces = subspaces(schemas, schema)
    learner = {"min_instances_slice": min_instances_slice, "threshold": threshold, "leaf": leaf,
               "seed": seed}
    per_client = {}
    for c in described:
        shared = [names for names, holders in spaces if c in holders and len(holders) > 1]
        own = next((names for names, holders in spaces if holders == [c]), [])
        per_client[c] = ({}, {"shared": shared, "own": own, "clusters": clusters, "learner": learner})
    replies = fed.broadcast("fit", per_client=per_client).require_all()

    def circuits_of(client: str, kind: str) -> list[tuple[Circuit, int]]:
        msg = replies[client]
        out = []
        for e in msg.config["circuits"]:
            if e["kind"] == kind:
                tensors = {k[len(e["prefix"]):]: v for k, v in msg.arrays.items() if k.startswith(e["prefix"])}
                out.append((from_payload(e["doc"], tensors, f"circuit from client '{client}'")[0], e["n"]))
        return out

    parts: list[list[tuple[Circuit, int]]] = []  # per subspace: its alternatives with sizes
    for names, holders in spaces:
        if len(holders) > 1:
            index = {c: per_client[c][1]["shared"].index(names) for c in holders}
            local = [circuits_of(c, "shared")[index[c]] for c in holders]
            total = sum(n for _, n in local)
            parts.append([(sum_of([ci for ci, _ in local], [n for _, n in local]), total)])
        else:
            parts.append(circuits_of(holders[0], "cluster"))
    rng = np.random.default_rng(seed)
    n_products = max(len(p) for p in parts) if products is None else products
    if n_products < max(len(p) for p in parts):
        raise FedpgmError(f"{n_products} products cannot use each of {max(len(p) for p in parts)} "
                          "clusters once; raise products")
    choices = []
    for p in parts:  # every alternative at least once, the rest at random
        picks = list(rng.permutation(len(p))) + list(rng.integers(0, len(p), n_products - len(p)))
        choices.append(picks)
    prods, weights = [], []
    for i in range(n_products):
        members = [parts[j][choices[j][i]] for j in range(len(parts))]
        circuit = product_of([m for m, _ in members], schema)
        prods.append(circuit)
        weights.append(sum(n for _, n in members))
    root = prods[0] if len(prods) == 1 else sum_of(prods, weights, schema)
    return {"circuit": root, "schema": schema,
            "subspaces": [{"features": names, "clients": holders} for names, holders in spaces],
            "communication": fed.ledger.totals()}
