import itertools

import numpy as np
import pytest

from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits import selection
from fedpgm.circuits.selection import LearnSPNCV
from fedpgm.data import load_dataset, partition
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.data.policy import ClientPolicy
from fedpgm.federation import InProcessFederation, PrivacyAudit, PrivacyViolation
from fedpgm.federation.base import ClientFailed, ClientFailure
from fedpgm.circuits.learners import log_likelihood_of
from fedpgm.fedpc import FedPC, defaults, fit_fedpc

HANDLERS = "fedpgm.fedpc.client:HANDLERS"


def run(part, **kw) -> FedPC:
    audit = PrivacyAudit(part)
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=audit) as fed:
        model = fit_fedpc(fed, **kw)
    assert audit.checked > 0
    return model


@pytest.fixture(scope="module")
def mixed():
    return load_dataset("synthetic:mixed", rows=2000, seed=0)


def test_horizontal_one_client_equals_the_local_circuit(mixed):
    part = partition(mixed, "horizontal", 1, seed=0)
    model = run(part, clusters=1, seed=3, refine_passes=0)  # (Algorithm 1: one pass)
    local = LearnSPN(defaults.min_instances(len(mixed.train)), 0.3, seed=3, min_leaf_rows=10).fit(
        mixed.train, mixed.schema)  # (the client's auto slice minimum and policy floor)
    np.testing.assert_allclose(model.log_likelihood(mixed.test), local.log_likelihood(mixed.test), rtol=1e-10)


def test_horizontal_is_the_size_weighted_mixture_of_client_circuits(mixed):
    part = partition(mixed, "horizontal", 3, seed=1)
    model = run(part, clusters=2, seed=4, refine_passes=0)
    model.circuit.validate()
    local = [LearnSPN(defaults.min_instances(len(c.train)), 0.3, seed=4, min_leaf_rows=10).fit(c.train, c.schema)
             .log_likelihood(mixed.test) for c in part.clients]  # (each client's auto slice minimum and floor)
    n = np.array([len(c.train) for c in part.clients], float)
    expected = np.logaddexp.reduce(np.stack(local) + np.log(n / n.sum())[:, None], axis=0)
    np.testing.assert_allclose(model.log_likelihood(mixed.test), expected, rtol=1e-10)
    central = LearnSPN().fit(mixed.train, mixed.schema).score(mixed.test)
    assert model.score(mixed.test) > central - 0.5
    comm = model.info["communication"]
    assert comm["bytes_up"] > 0 and comm["rounds"] == 2
    assert model.info["critical_path_seconds"] <= sum(model.info["client_seconds"].values()) + 1


def test_vertical_with_one_cluster_is_the_product_of_the_local_circuits(mixed):
    part = partition(mixed, "vertical", 2, seed=1)
    model = run(part, clusters=1, seed=2)
    expected = sum(LearnSPN(100, 0.3, seed=2).fit(c.train, c.schema).log_likelihood(mixed.test[c.columns])
                   for c in part.clients)
    np.testing.assert_allclose(model.log_likelihood(mixed.test), expected, rtol=1e-10)
    assert [s["clients"] for s in model.plan.subspaces] == [["client-0"], ["client-1"]]


def test_hybrid_builds_shared_sums_and_cluster_products(mixed):
    part = partition(mixed, "hybrid", 2, seed=1, shared=2)
    model = run(part, clusters=2)
    model.circuit.validate()
    shared = [s for s in model.plan.subspaces if len(s["clients"]) == 2]
    assert shared and sum(len(s["features"]) for s in shared) >= 2
    assert np.isfinite(model.log_likelihood(mixed.test)).all()


def check_normalised(model: FedPC) -> None:
    schema = model.schema
    grid = np.array(list(itertools.product(*[range(f.cardinality) for f in schema.features])), float)
    assert np.exp(model.log_likelihood(grid)).sum() == pytest.approx(1.0, abs=1e-10)


@pytest.mark.parametrize("glue", ["random", "combinatorial", "aligned"])
def test_every_gluing_gives_a_normalised_circuit(glue):
    ds = load_dataset("bn:asia", rows=1500, seed=0)
    for split in ("vertical", "hybrid"):
        part = partition(ds, split, 2, seed=0)
        model = run(part, clusters=3, glue_how=glue, params={"min_instances_slice": 50})
        model.circuit.validate()
        check_normalised(model)
        own = [a for a in model.plan.alternatives if len(a) > 1]
        if glue == "combinatorial":
            assert len(model.plan.products) == int(np.prod([len(a) for a in own]))
        if glue == "aligned":
            assert "shared_with_server" in model.info


def test_aligned_gluing_captures_dependence_across_clients():
    """Two clients whose columns depend on each other only through a shared latent cluster."""
    ds = load_dataset("synthetic:gmm", rows=3000, seed=0)
    part = partition(ds, "vertical", 2, seed=0)
    scores = {g: run(part, clusters=4, glue_how=g, seed=0).score(ds.test) for g in ("random", "aligned")}
    assert scores["aligned"] > scores["random"] + 0.1, scores


def test_split_placement_gives_the_server_numbers_and_marginalises_lost_clients(mixed):
    for split, opts in (("vertical", {}), ("hybrid", {"shared": 2})):
        part = partition(mixed, split, 2, seed=2, **opts)
        server = run(part, clusters=2, seed=1)
        with InProcessFederation(part, HANDLERS, mode="sequential", audit=PrivacyAudit(part)) as fed:
            split_model = fit_fedpc(fed, clusters=2, seed=1, placement="split")
            assert split_model.circuit is None and split_model.info["communication"]["bytes_up"] < \
                server.info["communication"]["bytes_up"]
            np.testing.assert_allclose(split_model.log_likelihood(mixed.test),
                                       server.log_likelihood(mixed.test), rtol=1e-9)
            if split == "vertical":
                lost = part.clients[1]
                fed.lost[lost.client_id] = ClientFailure(lost.client_id, "loglik", "unavailable", "test")
                marginal = mixed.test.copy()
                marginal[lost.columns] = np.nan
                np.testing.assert_allclose(split_model.log_likelihood(mixed.test),
                                           server.log_likelihood(marginal), rtol=1e-9)
                assert "unreachable" in split_model.notes[0]
    with pytest.raises(FedpgmError, match="split across its clients"):
        split_model.mpe(mixed.test)


def test_classification_with_the_label_at_one_vertical_client():
    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "vertical", 2, seed=0)
    model = run(part, clusters=2)
    accuracy = (model.predict(ds.test) == ds.test[ds.schema.label].to_numpy()).mean()
    assert accuracy > 0.9
    proba = model.predict_proba(ds.test)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_ratspn_learner(mixed):
    part = partition(mixed, "vertical", 2, seed=0)
    model = run(part, clusters=2, learner="ratspn", params={"em_iterations": 5})
    model.circuit.validate()
    assert np.isfinite(model.score(mixed.test))


def test_clients_with_chow_liu_tree_leaves():
    """Horizontal clients on discrete data each learn LearnSPN with Chow-Liu leaves: the FedPC is
    their row-weighted mixture, and beats clients with independent leaves."""
    ds = load_dataset("bn:asia", rows=3000, seed=0)
    part = partition(ds, "horizontal", 2, seed=0, scheme="iid")
    trees = run(part, params={"min_instances_slice": 5000, "leaf_model": "chow-liu"}, refine_passes=0)
    flat = run(part, params={"min_instances_slice": 5000}, refine_passes=0)
    trees.circuit.validate()
    local = [LearnSPN(min_instances_slice=5000, leaf_model="chow-liu", min_leaf_rows=10).fit(c.train, c.schema)
             for c in part.clients]  # (the client's policy floor, min_rows 10, applies to its tree tables)
    w = np.array([len(c.train) for c in part.clients]) / len(ds.train)
    mixture = np.log(sum(wk * np.exp(m.score_samples(ds.test)) for wk, m in zip(w, local)))
    np.testing.assert_allclose(trees.log_likelihood(ds.test), mixture, atol=1e-9)
    assert trees.score(ds.test) > flat.score(ds.test) + 0.1


def test_clients_choosing_their_own_learnspn_settings(monkeypatch):
    """learnspn-cv: each horizontal client runs the validation search on its own rows (nothing of
    it is sent but the circuit); the FedPC is the row-weighted mixture of the circuits each
    client's LearnSPNCV gives, and every chosen slice minimum stays at the client's policy floor."""
    monkeypatch.setattr(selection, "EM_MAX", 2)  # (the search ends by its grid, never by the clock)
    ds = load_dataset("bn:asia", rows=3000, seed=0)
    part = partition(ds, "horizontal", 2, seed=0, scheme="iid")
    for c in part.clients:
        c.policy = ClientPolicy(min_rows=400)
    model = run(part, clusters=1, learner="learnspn-cv", params={"budget_s": 600}, refine_passes=0)
    model.circuit.validate()
    assert all(n == ["min_instances_floor raised from 1 to 400 by the client's policy (min_rows)"]
               for n in model.info["client_policy"].values())
    local = [LearnSPNCV(budget_s=600, min_instances_floor=400, min_leaf_rows=400).fit(c.train, c.schema)
             for c in part.clients]  # (EM passes are floored at 400 rows too, so the search may keep them)
    chosen = [m.selection_["chosen"] for m in local]
    assert all(c["min_instances_slice"] >= 400 for ch in chosen for c in ch.get("components", [ch]))
    w = np.array([len(c.train) for c in part.clients]) / len(ds.train)
    mixture = np.log(sum(wk * np.exp(m.score_samples(ds.test)) for wk, m in zip(w, local)))
    np.testing.assert_allclose(model.log_likelihood(ds.test), mixture, atol=1e-9)


def test_save_and_load_round_trip(mixed, tmp_path):
    part = partition(mixed, "vertical", 2, seed=0)
    model = run(part, clusters=2)
    model.save(tmp_path / "m")
    back = FedPC.load(tmp_path / "m")
    np.testing.assert_allclose(back.log_likelihood(mixed.test), model.log_likelihood(mixed.test))
    assert back.plan == model.plan and back.info["glue"] == "aligned"
    (tmp_path / "m" / "fedpc.json").write_text("{")
    with pytest.raises(FedpgmError, match="not valid JSON"):
        FedPC.load(tmp_path / "m")


def test_bad_inputs(mixed):
    part = partition(mixed, "vertical", 2, seed=0)
    with pytest.raises(FedpgmError, match="clusters requested but client"):
        run(part, clusters=10_000)
    with pytest.raises(FedpgmError, match="clusters must be >= 1"):
        run(part, clusters=0)
    with pytest.raises(FedpgmError, match="unknown glue"):
        run(part, glue_how="magic")
    with pytest.raises(FedpgmError, match=r"'min_instances_slice' parameter of LearnSPN must be an int in the range \[1, inf\)"):
        run(part, params={"min_instances_slice": 0})
    misaligned = partition(mixed, "vertical", 2, seed=0)
    misaligned.clients[1].train = misaligned.clients[1].train.iloc[:-5]
    with pytest.raises(FedpgmError, match="do not align"):
        run(misaligned)
    empty = partition(mixed, "horizontal", 2, seed=0)
    empty.clients[1].train = empty.clients[1].train.iloc[:0]
    with pytest.raises(FedpgmError, match="have no rows"):
        run(empty)
    unlabelled = partition(mixed, "vertical", 2, seed=0)
    for c in unlabelled.clients:  # nobody keeps the label
        keep = [f for f in c.schema.features if f.name != mixed.schema.label]
        c.schema = Schema(tuple(keep), None)
        c.train = c.train[c.schema.names]
    model = run(unlabelled, clusters=1)
    with pytest.raises(FedpgmError, match="needs a target"):
        model.predict_proba(mixed.test.drop(columns=[mixed.schema.label]))
    with pytest.raises(FedpgmError, match="no client holds 'y'"):
        model.predict_proba(mixed.test.drop(columns=[mixed.schema.label]), target="y")


def test_feature_types_must_agree_across_clients():
    other = load_dataset("bn:asia", rows=300, seed=0)
    clash = partition(other, "vertical", 2, seed=0)
    c = clash.clients[1]
    name = c.schema.names[0]
    feats = [Feature(name, "continuous") if f.name == name else f for f in c.schema.features]
    c.schema = Schema(tuple(feats), c.schema.label)
    clash.clients[0].schema = Schema(tuple(list(clash.clients[0].schema.features)
                                           + [clash.schema[name]]), clash.clients[0].schema.label)
    clash.clients[0].train = clash.clients[0].train.assign(**{name: c.train[name]})
    clash.clients[0].test = None
    with pytest.raises(FedpgmError, match=f"feature '{name}' has different types"):
        run(clash)


def test_the_label_client_clusters_each_class_apart(tmp_path):
    from fedpgm.federation.handlers import ClientContext
    from fedpgm.fedpc.client import clusters_of

    ds = load_dataset("breast_cancer", seed=0)
    holder = partition(ds, "vertical", 2, seed=0, label_to="client-0")["client-0"]
    ctx = ClientContext(holder.client_id, holder, tmp_path)
    names = holder.schema.names
    labels = clusters_of(ctx, names, 6, seed=0, by_label=True)
    y = holder.train[ds.schema.label].to_numpy()
    assert sorted(np.unique(labels)) == list(range(6))
    for c in range(6):  # every cluster holds one class only, and both classes get clusters
        assert len(np.unique(y[labels == c])) == 1
    assert len({y[labels == c][0] for c in range(6)}) == 2
    for plain in (clusters_of(ctx, names, 6, seed=0),  # random gluing: plain k-means
                  clusters_of(ctx, [n for n in names if n != ds.schema.label], 6, seed=0, by_label=True)):
        assert any(len(np.unique(y[plain == c])) == 2 for c in range(6))


def test_a_server_asking_for_one_row_leaves_gets_a_clamped_fit():
    """Issue 23, point 4: with min_instances_slice=1 a client's reply once carried thousands of
    raw values as Gaussian leaf means. The client's policy raises it to its floor (10 rows behind
    every leaf and cluster), says so in the reply, and the fit passes the audit on both sides."""
    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "horizontal", 2, seed=0)
    audit = PrivacyAudit(part)
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=audit) as fed:
        model = fit_fedpc(fed, clusters=2, params={"min_instances_slice": 1}, seed=0)
    notes = model.info["client_policy"]
    assert sorted(notes) == ["client-0", "client-1"]
    assert all("min_instances_slice raised from 1 to 10" in n[0] for n in notes.values())
    means = np.concatenate([np.ravel(nd.params["mean"]) for nd in model.circuit.nodes
                            if getattr(nd, "dist", None) == "gaussian"])
    raw = np.concatenate([c.train.to_numpy(dtype=float).ravel() for c in part.clients])
    assert np.isin(means, raw).mean() < 0.05  # (a handful of columns are constant on a slice)
    # without the floor (a client whose own policy allows one row, audit off) the leak is real
    for c in part.clients:
        c.policy = ClientPolicy(min_rows=1, audit=False)
    with InProcessFederation(part, HANDLERS, mode="sequential", audit=audit) as fed:
        with pytest.raises(PrivacyViolation, match="contains"):
            fit_fedpc(fed, clusters=2, params={"min_instances_slice": 1}, seed=0)


def test_a_client_merges_clusters_below_its_floor_and_refuses_families_it_does_not_serve():
    ds = load_dataset("breast_cancer", seed=0)
    part = partition(ds, "vertical", 2, seed=0)
    part.clients[0].policy = ClientPolicy(min_rows=150)
    with InProcessFederation(part, HANDLERS, mode="sequential") as fed:
        model = fit_fedpc(fed, clusters=6, seed=0)
    sizes = {c: [x["n"] for x in model.plan.components if x["client"] == c and x["key"].startswith("cluster")]
             for c in ("client-0", "client-1")}
    assert len(sizes["client-1"]) == 6 and len(sizes["client-0"]) < 6 and min(sizes["client-0"]) >= 150
    assert any("clusters lowered from 6 to" in n for n in model.info["client_policy"]["client-0"])
    model.circuit.validate()
    assert np.isfinite(model.log_likelihood(ds.test)).all()
    part.clients[0].policy = ClientPolicy(min_rows=10_000)
    with InProcessFederation(part, HANDLERS, mode="sequential") as fed:
        with pytest.raises(ClientFailed, match="will not send a circuit of 455 rows .*min_rows is 10000"):
            fit_fedpc(fed, clusters=2, seed=0)
    part.clients[0].policy = ClientPolicy(families=("ngm",))
    with InProcessFederation(part, HANDLERS, mode="sequential") as fed:
        with pytest.raises(ClientFailed, match="client 'client-0' does not serve 'fedpc'.*allows ngm"):
            fit_fedpc(fed, clusters=2, seed=0)


def test_the_papers_table4_settings_come_from_one_place():
    from fedpgm.fedpc.experiment import PAPER_TABLE4, FitSettings, paper_settings

    s = paper_settings("vertical", "breast_cancer", FitSettings(clusters=2, params={"min_instances_slice": 20}))
    assert s.params == {"min_instances_slice": 300, "threshold": 0.4} and s.glue == "combinatorial"
    h = paper_settings("horizontal", "adult", FitSettings())
    assert h.params == {"min_instances_slice": 200, "threshold": 0.3} and h.glue == "random"  # no gluing there
    assert {(split, d) for split, d in PAPER_TABLE4} == {(sp, d) for sp in ("horizontal", "vertical", "hybrid")
                                                         for d in ("adult", "credit", "breast_cancer")}
    with pytest.raises(FedpgmError, match="Table 4 has no vertical setting for 'wine'"):
        paper_settings("vertical", "wine", FitSettings())


def test_a_cluster_that_never_observes_a_column_takes_its_model_from_all_rows(tmp_path):
    """k-means puts the rows missing a column together (geepack's dietox: every cluster circuit of
    its 'Feed' client failed); such a cluster's circuit is the client's circuit of that column on
    all its rows times that of the others on the cluster's rows."""
    import pandas as pd

    from fedpgm.data.partition import ClientData
    from fedpgm.federation.handlers import ClientContext
    from fedpgm.fedpc.client import learn

    rng = np.random.default_rng(0)
    x = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(3.0, 2.0, size=300)})
    x.loc[:99, "b"] = np.nan
    schema = Schema((Feature("a", "continuous"), Feature("b", "continuous")))
    ctx = ClientContext("c", ClientData("c", schema, x), tmp_path)
    params = {"min_instances_slice": 1000}  # (one product of leaves: each leaf's fit is plain to see)
    circuit = learn(ctx, ["a", "b"], np.arange(100), "learnspn", params)
    grid = np.array([[np.nan, v] for v in (-1.0, 3.0, 7.0)])
    whole_b = learn(ctx, ["b"], np.arange(300), "learnspn", params)
    np.testing.assert_allclose(log_likelihood_of(circuit, ["a", "b"], grid),
                               log_likelihood_of(whole_b, ["b"], grid[:, 1:]), rtol=1e-12)
    only_a = learn(ctx, ["a"], np.arange(100), "learnspn", params)
    grid_a = np.array([[v, np.nan] for v in (-1.0, 0.0, 2.0)])
    np.testing.assert_allclose(log_likelihood_of(circuit, ["a", "b"], grid_a),
                               log_likelihood_of(only_a, ["a"], grid_a[:, :1]), rtol=1e-12)


def test_the_client_warm_up_answers_a_fit_and_leaves_no_folder(monkeypatch, tmp_path):
    from fedpgm.fedpc import client

    replies = []

    def answering(request, ctx):
        replies.append(real(request, ctx))
        return replies[-1]

    real = client.fit
    monkeypatch.setattr(client, "fit", answering)
    client.warm_up(tmp_path / "scratch")
    assert [e["key"] for e in replies[0].config["circuits"]] == ["cluster0", "cluster1"]
    assert sum(e["n"] for e in replies[0].config["circuits"]) == 64
    assert list(tmp_path.iterdir()) == []
