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
from scipy import sparse
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
def glue(sizes: list[list[int]], how: str, products: int | None,
         rng: np.random.Generator) -> tuple[list[list[int]], list[float]]:
    """Products and root weights of random or combinatorial gluing (aligned gluing: ``aligned``)
    from the alternatives' training sizes ``sizes[j][a]``.

    ``random``: P products (default: the most alternatives of any subspace), every alternative in
    at least one; ``combinatorial``: every combination; both weighted by rho (the summed training
    sizes of a product's children).
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
    else:
        raise FedpgmError(f"unknown glue '{how}'; use one of {', '.join(GLUES)}")
    rho = np.array([sum(sizes[j][a] for j, a in enumerate(c)) for c in chosen], dtype=float)
    return chosen, list(rho / rho.sum())


# -- aligned gluing: a model of the clients' cluster tuples -----------------------------------
PRODUCT_WEIGHTS = np.linspace(0.0, 1.0, 21)
CLASSES = (2, 4, 8, 16, 32, 64)  # latent classes ``tuple_model`` tries, in this order
CLASSES_PRODUCT_FLOOR = 0.1  # the product's least weight beside latent classes (``tuple_model``)


@dataclass(frozen=True)
class TupleModel:
    """Aligned gluing's model of the tuples of the clients' cluster indices on the shared rows:
    ``classes`` latent classes (a mixture of products of one cluster distribution per client;
    None: the observed tuples, each weighted by its count), mixed with the plain product of the
    clients' circuits of all their rows at weight ``product``."""
    classes: int | None
    product: float

    def describe(self) -> str:
        joint = "the observed tuples" if self.classes is None else f"{self.classes} latent classes"
        return f"{joint}, mixed with the plain product of the clients weighted {self.product:.2f}"


def latent_classes(tuples: np.ndarray, radix: list[int], classes: int, seed: int = 0, prior: float = 0.1,
                   tol: float = 1e-4, iterations: int = 200) -> tuple[np.ndarray, list[np.ndarray]]:
    """A latent class model of cluster tuples, p(z) = sum_h pi_h prod_j theta_j[h, z_j], by EM.

    ``tuples``: (rows, subspaces) cluster indices, subspace j's below ``radix[j]``; EM runs over
    the distinct tuples with their counts, from random responsibilities (``seed``), with
    ``prior`` pseudo-rows per class and cluster, until the log-likelihood gains less than ``tol``
    of itself. Returns pi (classes,) and theta_j (classes, radix[j]) per subspace.

    Written here rather than taken from a library: scikit-learn has no mixture of categorical
    products, and the model is twenty lines of EM on a count table."""
    distinct, counts = np.unique(tuples, axis=0, return_counts=True)
    members = [sparse.csr_matrix((np.ones(len(distinct)), (distinct[:, j], np.arange(len(distinct)))),
                                 shape=(k, len(distinct))) for j, k in enumerate(radix)]  # (radix[j], distinct)
    resp = np.random.default_rng(seed).dirichlet(np.ones(classes), size=len(distinct))  # (distinct, classes)
    previous = -np.inf
    for _ in range(iterations):
        weighted = resp * counts[:, None]
        pi = (weighted.sum(axis=0) + 1e-3) / (counts.sum() + 1e-3 * classes)
        theta = [np.asarray(m @ weighted).T + prior for m in members]  # (classes, radix[j])
        theta = [t / t.sum(axis=1, keepdims=True) for t in theta]
        joint = np.log(pi) + sum(np.log(t).T[distinct[:, j]] for j, t in enumerate(theta))  # (distinct, classes)
        top = joint.max(axis=1)  # (log-sum-exp by hand: scipy's checks its input each call, which cost
        norm = top + np.log(np.exp(joint - top[:, None]).sum(axis=1))  # this loop 1 of its 1.3 s)
        loglik = float(norm @ counts)
        resp = np.exp(joint - norm[:, None])
        if loglik - previous < tol * abs(loglik):
            break
        previous = loglik
    return pi, theta


def class_likelihood(tuples: np.ndarray, pi: np.ndarray, theta: list[np.ndarray]) -> np.ndarray:
    """(rows,) p(z) of each tuple under a latent class model (``latent_classes``)."""
    per_class = pi[None, :] * np.prod([t[:, tuples[:, j]].T for j, t in enumerate(theta)], axis=0)
    return per_class.sum(axis=1)


def tuple_model(tuples: np.ndarray, radix: list[int], folds: int = 5, seed: int = 0) -> TupleModel:
    """The model of cluster tuples (rows, subspaces) with the highest log-likelihood on held-out
    rows over ``folds`` random folds (of the tuples sorted first, so the choice does not depend
    on the order they came in): the observed tuples or ``CLASSES`` latent classes (tried in
    order until one does no better than the one before), each mixed with the product of the
    clusters' marginals at a weight in ``PRODUCT_WEIGHTS``. The product alone (weight 1) where
    the clusters look independent; a weight near 0 where a joint generalises. Fewer rows than
    folds: the product alone.

    Beside latent classes the product keeps at least ``CLASSES_PRODUCT_FLOOR``: on tuples a row's
    clusters are known, on a new row they are not, and each cluster's circuit was learned on a
    fraction of the client's rows, so a class model that held-out tuples prefer alone can still
    miss new rows (the corpus of docs/real_tables.md, mlmRev/bdf vertical x3: 64 classes alone
    15.7% below the centralized circuit, with the product at 0.1 9.6%). The observed tuples keep
    the whole grid: where they are chosen with no product the clusters are near copies of
    each other, which new rows share (Stat2Data/Airlines vertical x3: -0.4% alone, 3.9% at 0.1)."""
    n = len(tuples)
    if n < folds:
        return TupleModel(None, 1.0)
    tuples = tuples[np.lexsort(tuples.T[::-1])][np.random.default_rng(seed).permutation(n)]
    codes = np.unique(tuples, axis=0, return_inverse=True)[1].ravel()
    fold = np.arange(n) % folds

    def held_out(classes: int | None) -> np.ndarray:
        """(weights,) held-out log-likelihood of the model mixed with the product at each weight
        (-inf below the floor of latent classes)."""
        scores = np.zeros(len(PRODUCT_WEIGHTS))
        if classes is not None:
            scores[PRODUCT_WEIGHTS < CLASSES_PRODUCT_FLOOR - 1e-12] = -np.inf
        for f in range(folds):
            train, test = fold != f, fold == f
            if classes is None:
                joint = (np.bincount(codes[train], minlength=codes.max() + 1) / train.sum())[codes[test]]
            else:
                joint = class_likelihood(tuples[test], *latent_classes(tuples[train], radix, classes, seed))
            marginal = np.ones(test.sum())
            for j, k in enumerate(radix):
                marginal *= (np.bincount(tuples[train, j], minlength=k) / train.sum())[tuples[test, j]]
            mix = (1 - PRODUCT_WEIGHTS[:, None]) * joint + PRODUCT_WEIGHTS[:, None] * marginal
            scores += np.log(np.maximum(mix, 1e-300)).sum(axis=1)
        return scores

    scores = held_out(None)
    best = TupleModel(None, float(PRODUCT_WEIGHTS[np.argmax(scores)])), scores.max()
    last = -np.inf
    for classes in CLASSES:
        scores = held_out(classes)
        if scores.max() <= last:
            break
        last = scores.max()
        if last > best[1]:
            best = TupleModel(classes, float(PRODUCT_WEIGHTS[np.argmax(scores)])), last
    return best[0]


def aligned(alternatives: list[list[Alternative]], radix: list[int], tuples: np.ndarray, model: TupleModel,
            seed: int = 0) -> tuple[list[list[int]], list[float]]:
    """Products and root weights of aligned gluing, from the cluster ``tuples`` (rows, subspaces)
    observed on the shared rows and their ``model``.

    ``alternatives[j]``: subspace j's cluster circuits (its first ``radix[j]``; one, its mixture,
    for a subspace held by several clients) and, last, the client's circuit of all its rows.
    Observed tuples (``model.classes`` None): one product per distinct tuple, weighted by its
    count. Latent classes: one product per class, which takes in each subspace the mixture of its
    cluster circuits with that class's weights (appended to ``alternatives``). Either way times
    1 - ``model.product``, and with ``model.product`` > 0 one product more, of each subspace's
    last alternative, of weight ``model.product``: the joint of the clusters mixed with the plain
    product of the clients, which it therefore cannot fall far below."""
    if len(tuples) == 0:
        raise FedpgmError("aligned gluing found no rows shared by the clients that cluster; use --glue random")
    if not 0.0 <= model.product <= 1.0:
        raise FedpgmError(f"the product's weight must lie in [0, 1], got {model.product}")
    plain = [len(alts) - 1 for alts in alternatives]
    if model.product == 1.0:
        return [plain], [1.0]
    if model.classes is None:
        keys, counts = np.unique(tuples, axis=0, return_counts=True)
        chosen = [list(map(int, k)) for k in keys]
        weights = counts / counts.sum()
    else:
        pi, theta = latent_classes(tuples, radix, model.classes, seed)
        first = [len(alts) for alts in alternatives]
        for j, alts in enumerate(alternatives):
            if radix[j] > 1:
                clusters = [alts[k].components[0] for k in range(radix[j])]
                alts.extend(Alternative(clusters, list(theta[j][h])) for h in range(model.classes))
        chosen = [[first[j] + h if radix[j] > 1 else 0 for j in range(len(alternatives))]
                  for h in range(model.classes)]
        weights = pi
    weights = list((1.0 - model.product) * np.asarray(weights, dtype=float))
    if model.product == 0.0:
        return chosen, weights
    return chosen + [plain], weights + [model.product]


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
