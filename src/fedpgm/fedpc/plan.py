"""The network side of a FedPC: which client circuits exist and how the server combines them.

A ``Plan`` is JSON (no numbers the clients did not send as sizes or counts):

- ``components``: one entry per client circuit, ``{"client", "key", "subspace", "n"}`` (``n`` =
  training rows it was learned on);
- ``alternatives[j]``: the choices for subspace ``j``. A subspace held by several clients has one
  alternative, the mixture of their circuits weighted by ``n`` (step 2 of Algorithm 1); a
  subspace held by one client has one alternative per cluster circuit (step 3);
- ``products``: for each product node, the alternative it takes in every subspace (step 4);
- ``product_weights``: the root sum's weights (step 5), normalised.

The same plan evaluates two ways with identical numbers: ``combine`` turns per-component
log-likelihoods (from clients, split placement) into the FedPC's, and ``assemble`` builds one
``Circuit`` whose components are shared, not copied (server placement).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import logsumexp

from fedpgm.circuits.structure import Circuit, copy_into, var_map_into
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError

GLUES = ("random", "combinatorial", "aligned")
MAX_PRODUCTS = 100_000


@dataclass
class Alternative:
    """One way to cover a subspace: a mixture of client components with normalised weights."""
    components: list[int]
    weights: list[float]  # normalised, one per component


@dataclass
class Plan:
    """Algorithm 1's plan: the subspaces (features, clients), the client components, the
    alternatives per subspace and the products that glue one alternative of each subspace."""
    subspaces: list[dict]  # {"features": [...], "clients": [...]}
    components: list[dict]  # {"client", "key", "subspace", "n"}
    alternatives: list[list[Alternative]]
    products: list[list[int]]  # (products, subspaces) alternative index
    product_weights: list[float]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict) -> "Plan":
        try:
            alts = [[Alternative(list(map(int, a["components"])), list(map(float, a["weights"])))
                     for a in alts] for alts in doc["alternatives"]]
            plan = cls(list(doc["subspaces"]), list(doc["components"]), alts,
                       [list(map(int, p)) for p in doc["products"]], list(map(float, doc["product_weights"])))
        except (KeyError, TypeError, ValueError) as e:
            raise FedpgmError(f"the FedPC plan is malformed ({type(e).__name__}: {e})") from None
        plan.check()
        return plan

    def check(self) -> None:
        n_comp = len(self.components)
        for j, alts in enumerate(self.alternatives):
            for a in alts:
                if not a.components or any(not 0 <= c < n_comp for c in a.components) \
                        or len(a.weights) != len(a.components):
                    raise FedpgmError(f"the FedPC plan's subspace {j} refers to unknown components")
        for p in self.products:
            if len(p) != len(self.alternatives) or any(not 0 <= a < len(alts)
                                                       for a, alts in zip(p, self.alternatives)):
                raise FedpgmError("the FedPC plan has a product outside its alternatives")
        w = np.asarray(self.product_weights)
        if len(w) != len(self.products) or (w < 0).any() or abs(w.sum() - 1) > 1e-6:
            raise FedpgmError("the FedPC plan's product weights must be one per product, summing to 1")

    def of_client(self, client: str) -> list[int]:
        return [i for i, c in enumerate(self.components) if c["client"] == client]

    def describe(self) -> str:
        kinds = [f"{len(s['features'])} features on {'+'.join(s['clients'])}" for s in self.subspaces]
        return (f"{len(self.subspaces)} subspaces ({'; '.join(kinds)}), {len(self.components)} client "
                f"circuits, {len(self.products)} products")


# -- gluing: which alternatives each product takes, and the root weights ----------------------
def glue(sizes: list[list[int]], how: str, products: int | None, rng: np.random.Generator,
         cooccurrence: dict[tuple, int] | None = None, product: float = 0.0) -> tuple[list[list[int]], list[float]]:
    """Products and root weights from the alternatives' training sizes ``sizes[j][a]``.

    ``random``: P products (default: the most alternatives of any subspace), every alternative in
    at least one; ``combinatorial``: every combination; both weighted by rho (the summed training
    sizes of a product's children). ``aligned``: the combinations of cluster indices observed on
    shared rows, weighted by how often (``cooccurrence`` maps a tuple over subspaces to a count),
    times 1 - ``product``, and with ``product`` > 0 one product more, of each subspace's last
    alternative (the client's circuit of all its rows, or its one cluster), of weight
    ``product``: the joint of the clusters mixed with the plain product of the clients, which it
    therefore cannot fall far below (``product_weight`` chooses the weight).
    """
    most = max(len(s) for s in sizes)
    if how == "random":
        n = most if products is None else products
        if n < most:
            raise FedpgmError(f"{n} products cannot use each of {most} clusters once; raise --products")
        picks = [list(rng.permutation(len(s))) + list(rng.integers(0, len(s), n - len(s))) for s in sizes]
        chosen = [[int(picks[j][i]) for j in range(len(sizes))] for i in range(n)]
    elif how == "combinatorial":
        total = int(np.prod([len(s) for s in sizes], dtype=float))
        if total > MAX_PRODUCTS:
            raise FedpgmError(f"combinatorial gluing would build {total} products (over {MAX_PRODUCTS}); "
                              "use fewer --clusters or --glue random")
        chosen = [list(c) for c in itertools.product(*[range(len(s)) for s in sizes])]
    elif how == "aligned":
        if not cooccurrence:
            raise FedpgmError("aligned gluing found no rows shared by the clients that cluster; "
                              "use --glue random")
        if not 0.0 <= product <= 1.0:
            raise FedpgmError(f"the product's weight must lie in [0, 1], got {product}")
        plain = [len(s) - 1 for s in sizes]
        if product == 1.0:
            return [plain], [1.0]
        keys = sorted(cooccurrence)
        counts = np.array([cooccurrence[k] for k in keys], dtype=float)
        weights = (1.0 - product) * counts / counts.sum()
        if product == 0.0:
            return [list(map(int, k)) for k in keys], list(weights)
        return [list(map(int, k)) for k in keys] + [plain], list(weights) + [product]
    else:
        raise FedpgmError(f"unknown glue '{how}'; use one of {', '.join(GLUES)}")
    rho = np.array([sum(sizes[j][a] for j, a in enumerate(c)) for c in chosen], dtype=float)
    return chosen, list(rho / rho.sum())


PRODUCT_WEIGHTS = np.linspace(0.0, 1.0, 21)


def product_weight(tuples: np.ndarray, folds: int = 5) -> float:
    """The weight w in ``PRODUCT_WEIGHTS`` of (1 - w) joint + w product of marginals, both of the
    cluster tuples ``tuples`` (rows, subspaces), with the highest log-likelihood on held-out rows
    over ``folds`` random folds (of the tuples sorted first, so the weight does not depend on
    the order they came in). 1 (the product alone) where the clusters look independent, near 0
    where their joint generalises; fewer rows than folds: 1."""
    n = len(tuples)
    if n < folds:
        return 1.0
    tuples = tuples[np.lexsort(tuples.T[::-1])][np.random.default_rng(0).permutation(n)]
    codes = np.unique(tuples, axis=0, return_inverse=True)[1].ravel()
    fold = np.arange(n) % folds
    scores = np.zeros(len(PRODUCT_WEIGHTS))
    for f in range(folds):
        train, test = fold != f, fold == f
        joint = (np.bincount(codes[train], minlength=codes.max() + 1) / train.sum())[codes[test]]
        marginal = np.ones(test.sum())
        for j in range(tuples.shape[1]):
            values = np.bincount(tuples[train, j], minlength=tuples[:, j].max() + 1) / train.sum()
            marginal *= values[tuples[test, j]]
        mix = (1 - PRODUCT_WEIGHTS[:, None]) * joint + PRODUCT_WEIGHTS[:, None] * marginal
        scores += np.log(np.maximum(mix, 1e-300)).sum(axis=1)
    return float(PRODUCT_WEIGHTS[np.argmax(scores)])


# -- evaluation -----------------------------------------------------------------------------
def combine(plan: Plan, component_ll: np.ndarray) -> np.ndarray:
    """(rows,) FedPC log-likelihood from (rows, components) per-component log-likelihoods.

    A NaN column is a component nobody could evaluate (its client is unreachable): a mixture
    over clients renormalises over the others, and a subspace with no component left is
    marginalised (contributes log 1 = 0), which is exact for a subspace held by one client.
    """
    rows = component_ll.shape[0]
    per_alt = []
    for alts in plan.alternatives:
        values = []
        for a in alts:
            ll = component_ll[:, a.components]
            present = ~np.isnan(ll[0]) if rows else np.ones(len(a.components), bool)
            if not present.any():
                values.append(np.zeros(rows))
                continue
            w = np.asarray(a.weights)[present]
            values.append(logsumexp(ll[:, present] + np.log(w / w.sum()), axis=1))
        per_alt.append(values)
    prods = np.stack([sum(per_alt[j][a] for j, a in enumerate(p)) for p in plan.products], axis=1)
    return logsumexp(prods + np.log(np.asarray(plan.product_weights)), axis=1)


def assemble(plan: Plan, schema: Schema, components: list[Circuit]) -> Circuit:
    """One circuit over ``schema``: each component copied once, sums, products and the root."""
    out = Circuit(schema)
    roots = [copy_into(out, c, var_map_into(schema, c)) for c in components]
    alt_nodes = []
    for alts in plan.alternatives:
        ids = []
        for a in alts:
            ids.append(roots[a.components[0]] if len(a.components) == 1
                       else out.sum([roots[c] for c in a.components], a.weights))
        alt_nodes.append(ids)
    prods = []
    for p in plan.products:
        children = [alt_nodes[j][a] for j, a in enumerate(p)]
        prods.append(children[0] if len(children) == 1 else out.product(children))
    if len(prods) > 1:
        out.sum(prods, plan.product_weights)
    out.nodes = prune(out)
    out.validate()
    return out


def prune(circuit: Circuit) -> list:
    """Nodes reachable from the root (unused cluster circuits of aligned gluing), renumbered."""
    keep, stack = set(), [circuit.root]
    while stack:
        i = stack.pop()
        if i not in keep:
            keep.add(i)
            stack.extend(getattr(circuit.nodes[i], "children", []))
    if len(keep) == len(circuit.nodes):
        return circuit.nodes
    new = {old: k for k, old in enumerate(sorted(keep))}
    nodes = []
    for old in sorted(keep):
        node = circuit.nodes[old]
        if hasattr(node, "children"):
            node.children = [new[c] for c in node.children]
        nodes.append(node)
    return nodes
