"""FedPC's defaults that adapt (``fedpgm.fedpc.defaults``): a slice minimum from each client's
rows, and a default gluing never below the plain product of the client circuits."""

import numpy as np
import pytest

from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits.structure import Sum
from fedpgm.data import load_dataset, partition
from fedpgm.data.policy import ClientPolicy
from fedpgm.federation import InProcessFederation, PrivacyAudit
from fedpgm.fedpc import FedPC, defaults, fit_fedpc
from fedpgm.fedpc.plan import Alternative, TupleModel, aligned, latent_classes, tuple_model

HANDLERS = "fedpgm.fedpc.client:HANDLERS"


def run(part, **kw) -> FedPC:
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=PrivacyAudit(part)) as fed:
        return fit_fedpc(fed, **kw)


def test_the_slice_minimum_is_the_square_root_of_the_rows_within_10_and_100():
    assert [defaults.min_instances(n) for n in (5, 90, 455, 1000, 50_000)] == [10, 10, 21, 32, 100]
    assert defaults.resolve({"min_instances_slice": None, "threshold": 0.3}, 90, floor=25) == {
        "min_instances_slice": 25, "threshold": 0.3}
    assert defaults.resolve({"min_instances_slice": 7}, 90) == {"min_instances_slice": 7}
    assert defaults.clusters("random") == defaults.clusters("combinatorial") == 1
    assert defaults.clusters("aligned") == defaults.ALIGNED_CLUSTERS


def test_a_small_client_learns_structure_under_the_auto_slice_minimum():
    """Breast cancer, horizontal x5: about 91 rows per client. The paper's 100 rows per slice
    leaves every client one product of leaves (the FedPC's only sum is its root over the
    clients); the auto minimum (10 rows here, sqrt(91) raised to 10) gives each client its own sums, and each client's
    circuit is LearnSPN with the minimum its rows give."""
    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "horizontal", 5, seed=0)
    fixed = run(part, params={"min_instances_slice": 100}, refine_passes=0)
    auto = run(part, refine_passes=0)  # (one pass: the mixture of the client circuits)
    assert sum(isinstance(n, Sum) for n in fixed.circuit.nodes) == 1
    assert sum(isinstance(n, Sum) for n in auto.circuit.nodes) > 10
    assert auto.score(ds.test) > fixed.score(ds.test) + 5  # nats per row
    local = [LearnSPN(defaults.min_instances(len(c.train)), 0.3, min_leaf_rows=10).fit(c.train, c.schema)
             for c in part.clients]
    n = np.array([len(c.train) for c in part.clients], float)
    mixture = np.logaddexp.reduce(np.stack([m.score_samples(ds.test) for m in local]) + np.log(n / n.sum())[:, None])
    np.testing.assert_allclose(auto.log_likelihood(ds.test), mixture, rtol=1e-10)


def test_the_default_gluing_is_never_below_the_product_of_the_clients():
    """Asia, vertical x2: random gluing of 2 clusters (the paper's) pairs clusters blind to the rows
    and falls far below the plain product of the client circuits (random, K = 1); the default
    (auto: aligned, 32 clusters weighted by their co-occurrence, mixed with that product) does not,
    and a client that takes no part in aligned gluing makes auto the product."""
    ds = load_dataset("bn:asia", rows=3000, seed=0)
    part = partition(ds, "vertical", 2, seed=0)
    product = run(part, glue_how="random").score(ds.test)
    assert run(part, glue_how="random", clusters=2).score(ds.test) < product - 1.0
    auto = run(part)
    assert (auto.info["glue"], auto.info["glue_requested"], auto.info["clusters"]) == ("aligned", "auto", 32)
    assert auto.info["cluster_fit"] == "learn"  # (the paper's)
    refit = run(part, cluster_fit="refit")  # (-2.374 nats per row against the default's -2.296 here)
    assert refit.info["cluster_fit"] == "refit" and product < refit.score(ds.test) < auto.score(ds.test)
    assert len(auto.plan.products) > 1 and 0.0 <= auto.info["tuple_model"]["product_weight"] < 1.0
    assert auto.score(ds.test) > product + 0.05
    part.clients[1].policy = ClientPolicy(memberships=False)
    fallback = run(part)
    assert fallback.info["glue"] == "random" and fallback.score(ds.test) == pytest.approx(product, abs=1e-12)


def shape(node) -> tuple:
    """A node without its parameters: its kind and its children or its variable and distribution."""
    return (type(node).__name__, getattr(node, "children", None), getattr(node, "var", None),
            getattr(node, "dist", None))


def test_a_refitted_cluster_circuit_keeps_the_whole_structure_and_fits_its_own_rows(tmp_path):
    """``cluster_fit="refit"``: a cluster's circuit is the client's circuit of all its rows (the
    same nodes and scopes) with parameters refitted by EM on the cluster's rows, which it then
    scores better than that circuit does, and the rows of other clusters worse; the circuit of all
    rows is left as it was. Breast cancer, 10 columns, 4 k-means clusters."""
    from fedpgm.data.partition import ClientData
    from fedpgm.federation.handlers import ClientContext
    from fedpgm.fedpc.client import kmeans, refitted

    ds = load_dataset("breast_cancer", seed=0)
    schema = ds.schema.select(ds.schema.names[:10])
    frame = ds.train[schema.names]
    whole = LearnSPN(min_instances_slice=20, threshold=0.3).fit(frame, schema).circuit_
    before = LearnSPN.from_circuit(whole, {}).score_samples(frame)
    ctx = ClientContext("client-0", ClientData("client-0", schema, frame, policy=ClientPolicy(min_rows=10)), tmp_path)
    labels = kmeans(frame.to_numpy(float), 4, seed=0)
    for c in range(4):
        rows = labels == c
        refit = refitted(ctx, whole, np.flatnonzero(rows), {})
        assert [shape(n) for n in refit.nodes] == [shape(n) for n in whole.nodes]
        scored = LearnSPN.from_circuit(refit, {}).score_samples(frame)
        assert scored[rows].mean() > before[rows].mean()
        assert scored[~rows].mean() < before[~rows].mean()
    np.testing.assert_array_equal(LearnSPN.from_circuit(whole, {}).score_samples(frame), before)


def subspaces_of(clusters: list[int]) -> list[list[Alternative]]:
    """Single-client subspaces of ``clusters[j]`` cluster circuits plus (last) each client's
    circuit of all its rows, component ids numbered across them."""
    out, next_id = [], 0
    for k in clusters:
        out.append([Alternative([next_id + i], [1.0]) for i in range(k + 1)])
        next_id += k + 1
    return out


def test_aligned_gluing_mixes_the_observed_tuples_with_the_plain_product():
    """Two single-client subspaces of 2 clusters each: one product per observed tuple, weighted by
    its count, times 1 - w, and the product of the clients' circuits of all their rows at w."""
    tuples = np.array([(0, 0)] * 30 + [(1, 1)] * 8 + [(1, 0)] * 2)
    chosen, weights = aligned(subspaces_of([2, 2]), [2, 2], tuples, TupleModel(None, 0.25))
    assert chosen == [[0, 0], [1, 0], [1, 1], [2, 2]]
    np.testing.assert_allclose(weights, [0.75 * 0.75, 0.75 * 0.05, 0.75 * 0.2, 0.25])
    chosen, weights = aligned(subspaces_of([2, 2]), [2, 2], tuples, TupleModel(None, 0.0))
    assert chosen == [[0, 0], [1, 0], [1, 1]] and weights == pytest.approx([0.75, 0.05, 0.2])
    assert aligned(subspaces_of([2, 2]), [2, 2], tuples, TupleModel(None, 1.0)) == ([[2, 2]], [1.0])


def latent_class_tuples(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Cluster tuples of 8 clients of 16 clusters each, drawn from 3 latent classes of weights
    0.2, 0.3, 0.5: (tuples (rows, 8), the classes' cluster distributions (3, 8, 16))."""
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.full(16, 0.3), size=(3, 8))
    h = rng.choice(3, size=rows, p=[0.2, 0.3, 0.5])
    u = rng.random((rows, 8, 1))
    return (u > np.cumsum(theta[h], axis=2)).sum(axis=2).clip(max=15), theta


def test_latent_classes_recover_the_classes_of_many_clients_tuples():
    """3,000 tuples over 8 clients, which the observed joint cannot generalise from (nearly every
    tuple is seen once): EM with 3 classes recovers the classes' weights to 0.02, and the model
    chosen on held-out folds is a few latent classes, not the observed tuples."""
    tuples, _ = latent_class_tuples(3000)
    assert len(np.unique(tuples, axis=0)) > 2500
    pi, theta = latent_classes(tuples, [16] * 8, 3)
    np.testing.assert_allclose(np.sort(pi), [0.2, 0.3, 0.5], atol=0.02)
    assert all(t.shape == (3, 16) and np.allclose(t.sum(axis=1), 1.0) for t in theta)
    model = tuple_model(tuples, [16] * 8)
    assert model.classes in (2, 4, 8) and model.product <= 0.1


def test_aligned_gluing_by_latent_classes_mixes_each_clients_clusters_per_class():
    """One product per latent class, which takes in each subspace the mixture of its cluster
    circuits with the class's weights (appended to the subspace's alternatives), plus the plain
    product; a subspace held by several clients (one cluster) keeps its one alternative."""
    tuples, _ = latent_class_tuples(2000)
    tuples = np.concatenate([tuples, np.zeros((len(tuples), 1), dtype=int)], axis=1)  # a shared subspace
    alternatives = subspaces_of([16] * 8) + [[Alternative([200, 201], [0.5, 0.5])]]
    chosen, weights = aligned(alternatives, [16] * 8 + [1], tuples, TupleModel(3, 0.1))
    assert len(chosen) == 4 and chosen[-1] == [16] * 8 + [0] and weights[-1] == 0.1
    assert sum(weights) == pytest.approx(1.0) and sorted(weights[:3]) == pytest.approx([0.18, 0.27, 0.45], abs=0.02)
    for h, product in enumerate(chosen[:3]):
        assert product == [17 + h] * 8 + [0]
        for j in range(8):
            mixture = alternatives[j][product[j]]
            assert mixture.components == [17 * j + k for k in range(16)] and sum(mixture.weights) == pytest.approx(1)
    assert len(alternatives[8]) == 1


def test_the_products_weight_follows_the_held_out_dependence_of_the_clusters():
    """Independent cluster indices: the product alone (w near 1); one client's index a copy of the
    other's: the observed joint (w 0); half copies, 16 clusters on 400 rows (a joint spread
    thin): in between."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, 2000)
    independent = np.stack([a, rng.integers(0, 4, 2000)], axis=1)
    copied = np.stack([a, a], axis=1)
    b = rng.integers(0, 16, 400)
    half = np.stack([b, np.where(rng.random(400) < 0.5, b, rng.integers(0, 16, 400))], axis=1)
    assert tuple_model(independent, [4, 4]).product >= 0.9
    assert tuple_model(copied, [4, 4]) == TupleModel(None, 0.0)
    assert 0.1 <= tuple_model(half, [16, 16]).product <= 0.6
    assert tuple_model(copied[:3], [4, 4]) == TupleModel(None, 1.0)  # fewer rows than folds


def test_eight_clients_glued_by_latent_classes_beat_their_observed_tuples():
    """pgmpy's insurance network, vertical x8 (1,000 rows): nearly every shared row's tuple of 8
    clients' clusters is unique, so auto gluing models the tuples by latent classes, and the
    circuit they give scores 2.5 nats per row above the observed tuples' (``smoothing`` 1: a
    pseudo-row each) and 3 above the plain product of the clients (16.90, 19.65, 20.24 nats)."""
    ds = load_dataset("bn:insurance", rows=1000, seed=0)
    part = partition(ds, "vertical", 8, seed=0)
    auto, counts, product = run(part), run(part, smoothing=1.0), run(part, glue_how="random")
    assert auto.info["tuple_model"]["classes"] in (8, 16, 32) and auto.info["tuple_model"]["product_weight"] >= 0.1
    assert counts.info["tuple_model"]["classes"] is None
    assert auto.score(ds.test) > counts.score(ds.test) + 2.5 and auto.score(ds.test) > product.score(ds.test) + 3
