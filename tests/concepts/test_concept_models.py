import networkx as nx
import numpy as np
import pytest
import torch

from fedpgm.concepts.data import make_concept_data
from fedpgm.concepts.experiment import FCMSettings, make_clients, run_fcm, run_fcm_tuned
from fedpgm.concepts.federation import RoundSettings
from fedpgm.concepts.models import KINDS, ConceptModel, arrays, module_of
from fedpgm.concepts.train import TrainSettings, average, evaluate, local_train, loss_of, trainable_modules
from fedpgm.errors import FedpgmError


@pytest.fixture(scope="module")
def asia():
    return make_concept_data("asia", rows=3000, seed=0)


def chain(*nodes):
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(zip(nodes[:-1], nodes[1:]))
    return g


@pytest.mark.parametrize("kind", KINDS)
def test_adding_a_concept_keeps_every_other_module_bit_identical(kind):
    cards = {"a": 2, "b": 3, "new": 2, "t": 2}
    model = ConceptModel(kind, 5, cards, chain("a", "b", "t"), "t", hidden=8, emb=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(20, 5)
    with torch.no_grad():
        out_before = model(x)
    g = chain("a", "b", "t")
    g.add_edge("new", "t")  # a new concept, a new parent of the task
    change = model.adapt(g, cards)
    after = model.state_dict()
    if kind != "opaque":
        assert change["added"] == ["new"]
    for k, v in before.items():  # nothing that existed moved
        assert torch.equal(after[k], v), k
    with torch.no_grad():
        out_after = model(x)
    for n, logits in out_before.items():  # and the new source starts at zero: same outputs
        assert torch.allclose(out_after[n], logits, atol=1e-6), n


def test_a_module_without_local_supervision_does_not_move(asia):
    model = ConceptModel("cgm", asia.x.shape[1], asia.cards, asia.dag, asia.task, hidden=16, emb=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = asia.part(0)[:500]
    codes = asia.codes[rows].copy()
    codes[:, asia.nodes.index("lung")] = -1  # this client cannot label lung
    units = local_train(model, asia.x[rows], codes, asia.nodes, TrainSettings(epochs=1))
    after = model.state_dict()
    assert "nodes.lung" not in units and "nodes.smoke" in units
    assert all(torch.equal(after[k], before[k]) for k in before if k.startswith("nodes.lung."))
    assert any(not torch.equal(after[k], before[k]) for k in before if k.startswith("nodes.smoke."))


def test_module_wise_average_uses_only_the_contributing_clients():
    model = ConceptModel("cbm", 3, {"a": 2, "b": 2, "t": 2}, chain("a", "b", "t"), "t", hidden=4)
    names = model.module_names()
    one, two = arrays(model), arrays(model)
    for k in one:
        one[k] = np.full_like(one[k], 1.0)
        two[k] = np.full_like(two[k], 4.0)
    avg = average([(one, ["encoder", "nodes.a"], 100), (two, ["encoder", "nodes.b"], 300)], names)
    enc = [k for k in avg if k.startswith("encoder.")]
    assert all(np.allclose(avg[k], (100 * 1 + 300 * 4) / 400) for k in enc)
    assert all(np.allclose(avg[k], 1.0) for k in avg if k.startswith("nodes.a."))
    assert all(np.allclose(avg[k], 4.0) for k in avg if k.startswith("nodes.b."))
    assert not any(k.startswith("nodes.t.") for k in avg)  # nobody trained the task module


def test_fcm_grows_and_beats_static_on_coverage(asia):
    rounds = dict(kind="cbm", rounds=40, per_round=4, join_round=4, patience=8, hidden=16, emb=4,
                  train=TrainSettings(lr=1e-2, epochs=3, batch_size=128))
    settings = dict(network="asia", clients=8)
    model, fcm = run_fcm(FCMSettings(**settings, rounds=RoundSettings(regime="fcm", **rounds)), data=asia)
    _, static = run_fcm(FCMSettings(**settings, rounds=RoundSettings(regime="static", **rounds)), data=asia)
    assert fcm["coverage"] == 1.0 and fcm["coverage"] > static["coverage"]
    assert fcm["joins"][0]["added"] and 0 < fcm["fraction_params_changed"] < 1
    assert fcm["privacy_audit_messages"] > 0 and fcm["bytes_up"] > 0
    assert len(fcm["val_task_loss"]) == fcm["rounds"] and fcm["task_accuracy"] > 0.65  # majority class: 0.56
    assert len(fcm["intervention_accuracy"]) >= 1
    te = asia.part(2)  # every concept given: only the task is left to score, label = task accuracy
    every = evaluate(model, asia.x[te], asia.codes[te], asia.nodes, asia.task, asia.cards, asia.dag, 99)
    assert every["label_accuracy"] == every["task_accuracy"] > fcm["task_accuracy"]


@pytest.mark.parametrize("regime", ["fcm", "local"])
def test_learning_rate_is_chosen_on_validation_loss(asia, regime):
    rounds = RoundSettings(kind="cbm", regime=regime, rounds=6, per_round=3, join_round=2, patience=6, hidden=8,
                           emb=4, train=TrainSettings(batch_size=256))
    _, rep = run_fcm_tuned(FCMSettings(network="asia", clients=6, rounds=rounds), [1e-4, 3e-2], data=asia)
    losses = {c["lr"]: c["best_val_task_loss"] for c in rep["lr_candidates"]}
    assert list(losses) == [1e-4, 3e-2] and losses[3e-2] < losses[1e-4]  # 6 rounds at 1e-4 barely move
    assert rep["lr"] == 3e-2 and rep["best_val_task_loss"] == losses[3e-2]
    with pytest.raises(FedpgmError, match="at least one learning rate"):
        run_fcm_tuned(FCMSettings(network="asia", clients=6, rounds=rounds), [], data=asia)
    with pytest.raises(FedpgmError, match="must be positive"):
        run_fcm_tuned(FCMSettings(network="asia", clients=6, rounds=rounds), [-1e-3], data=asia)


def test_bad_learning_rates_are_refused_before_any_work(monkeypatch):
    import fedpgm.concepts.experiment as experiment

    def never(*args, **kwargs):
        raise AssertionError("sampled data or trained before checking the learning rates")

    monkeypatch.setattr(experiment, "make_concept_data", never)
    monkeypatch.setattr(experiment, "run_fcm", never)
    with pytest.raises(FedpgmError, match=r"--lrs \[0\.0\]: every learning rate must be positive"):
        run_fcm_tuned(FCMSettings(network="asia"), [1e-3, 0.0])


def test_bad_input_is_refused(asia):
    with pytest.raises(FedpgmError, match="task node 'nope'|not a column"):
        make_concept_data("asia", task="nope", rows=200)
    with pytest.raises(FedpgmError, match="per-round 30 exceeds"):
        run_fcm(FCMSettings(clients=20, rounds=RoundSettings(per_round=30)), data=asia)
    clients, _, _ = make_clients(asia, FCMSettings(clients=4))
    from fedpgm.concepts.federation import HANDLERS
    from fedpgm.federation import InProcessFederation

    blank = clients[0]
    for n in blank.train.columns:
        if not n.startswith("input:"):
            blank.train[n] = np.nan
    with InProcessFederation([blank], HANDLERS, mode="sequential") as fed:
        replies = fed.broadcast("describe")
    assert "neither concept nor task labels" in str(replies.failures["client-0"])


@pytest.mark.parametrize("kind", KINDS)
def test_dp_client_updates_report_the_accountants_epsilon(asia, kind):
    rounds = RoundSettings(kind=kind, regime="fcm", rounds=4, per_round=3, join_round=2, patience=4, hidden=8,
                           emb=4, dp_epsilon=2.0, train=TrainSettings(batch_size=256))
    _, rep = run_fcm(FCMSettings(network="asia", clients=6, rounds=rounds), data=asia)
    spent = rep["dp"]["epsilon_spent"]
    assert len(spent) >= 3 and all(0 <= e <= 2.0 for e in spent.values()) and max(spent.values()) > 0
    assert rep["dp"]["epsilon_spent_max"] == max(spent.values())


@pytest.mark.parametrize("kind", KINDS)
def test_per_sample_gradients_average_to_the_batch_gradient(asia, kind):
    """DP-SGD clips per-sample gradients: for a client labelling two concepts (one intervened)
    every trainable parameter must have them, and their mean must be the batch gradient. (CEM's
    scorer, once called per concept, had none: Opacus failed with 'Per sample gradient is not
    initialized'.)"""
    from opacus import GradSampleModule

    model = ConceptModel(kind, asia.x.shape[1], asia.cards, asia.dag, asia.task, hidden=8, emb=4)
    columns = ["asia", "tub"] if kind != "opaque" else [asia.task]
    units, idle, names = trainable_modules(model, set(columns)), model.idle_parameters(set(columns)), model.module_names()
    for name, p in model.named_parameters():
        p.requires_grad_(module_of(name, names) in units and name not in idle)
    rows = asia.part(0)[:64]
    Y = torch.as_tensor(asia.codes[rows][:, [asia.nodes.index(c) for c in columns]], dtype=torch.long)
    intervene = torch.zeros(len(rows), len(columns), dtype=torch.bool)
    intervene[:, 0] = kind != "opaque"
    net = GradSampleModule(model)
    loss_of(model, net(torch.as_tensor(asia.x[rows]), Y, intervene, columns), Y, columns, 0.8).backward()
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trained
    for name, p in trained:
        assert p.grad_sample is not None, name
        torch.testing.assert_close(p.grad_sample.mean(0), p.grad, atol=1e-6, rtol=1e-4, msg=name)
    net._close()


def test_dp_per_update_scope_bounds_each_update_and_reports_their_composition(asia):
    rounds = RoundSettings(kind="cbm", regime="fcm", rounds=4, per_round=3, join_round=2, patience=4, hidden=8,
                           emb=4, dp_epsilon=2.0, dp_scope="update", train=TrainSettings(batch_size=256))
    _, rep = run_fcm(FCMSettings(network="asia", clients=6, rounds=rounds), data=asia)
    dp = rep["dp"]
    assert dp["scope"] == "update" and 1.9 <= dp["epsilon_per_update_max"] <= 2.0
    assert dp["epsilon_spent_max"] > 2.0  # a client that sent several updates spent more in all
    with pytest.raises(FedpgmError, match="unknown DP scope 'round'"):
        run_fcm(FCMSettings(network="asia", clients=6, rounds=RoundSettings(dp_epsilon=1.0, dp_scope="round")),
                data=asia)


def fcm_rounds(asia, clients, initial, late, rounds):
    from fedpgm.concepts.federation import HANDLERS, run_rounds
    from fedpgm.federation import InProcessFederation

    va = asia.part(1)
    with InProcessFederation(clients, HANDLERS, mode="sequential") as fed:
        return run_rounds(fed, initial, late, asia.cards, asia.task, asia.x.shape[1],
                          (asia.x[va], asia.codes[va, asia.nodes.index(asia.task)]), rounds)


def test_a_clients_dp_policy_is_never_lowered_by_the_server(asia):
    """A client whose policy demands epsilon <= 1 refuses a round without DP, lowers a server's
    epsilon 8 to 1, and reports what it spent; the others train as the server asked."""
    from fedpgm.data.policy import ClientPolicy
    from fedpgm.federation.base import ClientFailed

    clients, initial, late = make_clients(asia, FCMSettings(network="asia", clients=4))
    strict = clients[0]
    strict.policy = ClientPolicy(max_epsilon=1.0)
    settings = dict(kind="cbm", regime="fcm", rounds=2, per_round=4, join_round=2, patience=4, hidden=8, emb=4,
                    train=TrainSettings(batch_size=256))
    with pytest.raises(ClientFailed, match=f"client '{strict.client_id}' trains only under differential "
                                           "privacy with epsilon <= 1.0; rerun with --dp-epsilon 1.0"):
        fcm_rounds(asia, clients, initial, late, RoundSettings(**settings))
    out = fcm_rounds(asia, clients, initial, late, RoundSettings(**settings, dp_epsilon=8.0))
    assert 0 < out["epsilon_spent"][strict.client_id] <= 1.0
    assert max(e for c, e in out["epsilon_spent"].items() if c != strict.client_id) > 1.0


def test_an_fcm_round_goes_on_with_its_quorum_and_names_who_was_left_out(asia):
    """A client that refuses to train (its policy demands DP, the server asks for none) stops a
    round unless the round's quorum lets it go on without that client."""
    from fedpgm.data.policy import ClientPolicy
    from fedpgm.federation.base import ClientFailed

    clients, initial, late = make_clients(asia, FCMSettings(network="asia", clients=4))
    refusing = clients[0]
    refusing.policy = ClientPolicy(max_epsilon=1.0)
    settings = dict(kind="cbm", regime="fcm", rounds=2, per_round=4, join_round=5, patience=4, hidden=8, emb=4,
                    train=TrainSettings(batch_size=256))
    everyone = [c.client_id for c in clients]
    with pytest.raises(ClientFailed, match=f"client '{refusing.client_id}'"):
        fcm_rounds(asia, clients, everyone, [], RoundSettings(**settings))
    out = fcm_rounds(asia, clients, everyone, [], RoundSettings(**settings, min_clients=3))
    assert [h["clients"] for h in out["history"]] == [everyone[1:]] * 2
    assert list(out["left_out"]) == [refusing.client_id] and "differential privacy" in out["left_out"][refusing.client_id]


def test_per_round_graph_aggregation_uses_exactly_the_sampled_clients(asia):
    """The paper's Algorithm 1: at every round the shared graph is aggregated from that round's
    sampled clients K_t (pairs none of them observes keep their last state); the model adapts
    whenever it changes."""
    from fedpgm.concepts.graphs import aggregate, from_edge_list
    from fedpgm.concepts.federation import GRAPH

    clients, initial, late = make_clients(asia, FCMSettings(network="asia", clients=6, perturbed_clients=0.5,
                                                            perturbed_edges=0.5))
    s = RoundSettings(kind="cgm", regime="fcm", rounds=8, per_round=2, join_round=3, patience=20, hidden=8,
                      emb=4, train=TrainSettings(batch_size=256), graph_rounds="round")
    out = fcm_rounds(asia, clients, initial, late, s)
    by_id = {c.client_id: c for c in clients}
    graph_of = {c: from_edge_list(by_id[c].meta[GRAPH]) for c in by_id}
    rows = {c: len(by_id[c].train) for c in by_id}
    changes = {g["round"]: g["edges"] for g in out["graph_changes"]}
    prev = None
    for h in out["history"]:
        cs = h["clients"]  # every sampled client answered
        new = aggregate([graph_of[c] for c in cs], [rows[c] for c in cs], asia.task, s.seed, previous=prev)
        edges = sorted([u, v] for u, v in new.graph.edges())
        if prev is not None and (set(new.graph.edges()) != set(prev.graph.edges()) or set(new.graph) != set(prev.graph)):
            assert changes.pop(h["round"]) == edges  # (a change of nodes or edges)
        prev = new
    assert changes == {} and out["graph_changes"]  # every change explained, and the graph did change
    assert out["graph"] is out["model"].graph  # the best round's model, with its own graph


def test_confidence_votes_need_every_clients_matrix(asia):
    from fedpgm.concepts.federation import CONFIDENCE

    clients, initial, late = make_clients(asia, FCMSettings(network="asia", clients=4))
    for c in clients[1:]:
        g = c.meta["concept_graph"]
        c.meta[CONFIDENCE] = {"edges": [[u, v, 0.8] for u, v in g["edges"]]}
    s = RoundSettings(kind="cbm", regime="fcm", rounds=1, per_round=2, join_round=5, hidden=8, emb=4,
                      train=TrainSettings(batch_size=256), graph_votes="confidence")
    with pytest.raises(FedpgmError, match=r"client\(s\) \['client-0'\] sent no edge-confidence matrix; with "
                                          "graph_votes='confidence' every client sends one"):
        fcm_rounds(asia, clients, initial, late, s)
    clients[0].meta[CONFIDENCE] = {"edges": [[u, v, 0.8] for u, v in clients[0].meta["concept_graph"]["edges"]]}
    out = fcm_rounds(asia, clients, initial, late, s)  # S = 0.8 A everywhere: the same vote as S = A
    assert sorted(out["graph"].edges()) == sorted(fcm_rounds(
        asia, clients, initial, late, RoundSettings(**{**s.__dict__, "graph_votes": "adjacency"}))["graph"].edges())


def test_paper_protocol_settings_and_shifted_late_clients(asia):
    """The paper's protocol comes from one place; late clients' root marginals move, their
    conditionals (the DAG's mechanisms) do not."""
    from fedpgm.concepts.experiment import PAPER_PROTOCOL, paper_protocol

    s = paper_protocol(FCMSettings(network="asia", clients=8))
    assert s.rounds.graph_rounds == PAPER_PROTOCOL["rounds"]["graph_rounds"] == "round"
    assert s.centralized_graph == "true" and s.late_shift == PAPER_PROTOCOL["late_shift"] > 0
    plain, _, late = make_clients(asia, FCMSettings(network="asia", clients=8))
    shifted, _, _ = make_clients(asia, s)
    roots = [n for n in asia.nodes if n != asia.task and asia.dag.in_degree(n) == 0]
    root = max(roots, key=lambda n: np.bincount(asia.codes[:, asia.nodes.index(n)]).min())  # the least skewed
    j = asia.nodes.index(root)

    def marginal(cs):
        codes = np.concatenate([asia.codes[c.train.index.to_numpy(), j] for c in cs if c.client_id in late])
        return np.bincount(codes, minlength=asia.cards[root]) / len(codes)

    assert np.abs(marginal(shifted) - marginal(plain)).max() > 0.05  # the late clients' root prior moved
    rows = np.concatenate([c.train.index.to_numpy() for c in shifted])
    assert len(np.unique(rows)) == len(rows)  # still disjoint
