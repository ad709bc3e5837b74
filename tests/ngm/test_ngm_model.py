import json

import numpy as np
import torch
import pandas as pd
import pytest

from fedpgm.errors import FedpgmError
from fedpgm.ngm.model import NGM
from fedpgm.ngm.train import NGMSettings, Teachers, hide, step_loss


def test_path_strength_off_the_graph_is_near_zero(chain_model):
    share = chain_model.off_graph_share()
    print("off-graph share per feature", np.round(share, 5))
    assert share.max() < 0.01


def test_direct_and_iterative_predictions_use_the_neighbours(chain, chain_model):
    _, test, _, _ = chain
    b = chain_model.predict(test, "b")
    rmse = np.sqrt(((b - test["b"]) ** 2).mean())
    assert rmse < 0.5 * test["b"].std()  # b given a and c: far better than its mean
    p = chain_model.predict(test, "k")
    assert p.shape == (len(test), 3) and np.allclose(p.sum(1), 1)
    accuracy = (p.argmax(1) == test["k"]).mean()
    assert accuracy > 0.75 > test["k"].value_counts(normalize=True).max()
    it = chain_model.predict(test.iloc[:300], "b", mode="iterative", steps=150)
    rmse_it = np.sqrt(((it - test["b"].iloc[:300]) ** 2).mean())
    assert rmse_it < 0.7 * test["b"].std()
    # partial evidence: one pass uses neighbours only; a is not one of c's, b is
    err = {tuple(ev): np.abs(chain_model.predict(test[ev], "c") - test["c"]).mean()
           for ev in (["a"], ["b"], ["b", "k"], [])}
    assert err[("b", "k")] < err[("b",)] < 0.6 * err[()]
    assert abs(err[("a",)] - err[()]) < 0.02 * err[()]


def test_samples_reproduce_marginals_and_correlations(chain, chain_model):
    train, _, _, _ = chain
    s = chain_model.sample(4000, seed=3)
    num = ["a", "b", "c", "z"]
    for col in num:
        assert abs(s[col].mean() - train[col].mean()) < 0.15 * train[col].std(), col
        assert abs(s[col].std() / train[col].std() - 1) < 0.2, col
    freq_data = train["k"].value_counts(normalize=True).sort_index()
    freq_samp = s["k"].value_counts(normalize=True).sort_index()
    assert np.abs(freq_data.to_numpy() - freq_samp.to_numpy()).max() < 0.06
    corr_data, corr_samp = train[num].corr().to_numpy(), s[num].corr().to_numpy()
    print("correlations data\n", corr_data.round(2), "\nsamples\n", corr_samp.round(2))
    assert np.abs(corr_data - corr_samp).max() < 0.15


def test_save_load_round_trip_and_damaged_files(chain, chain_model, tmp_path):
    _, test, _, _ = chain
    chain_model.save(tmp_path / "m")
    back = NGM.load(tmp_path / "m")
    assert np.array_equal(back.predict(test, "k"), chain_model.predict(test, "k"))
    assert back.sample(50, seed=1).equals(chain_model.sample(50, seed=1))
    doc = json.loads((tmp_path / "m" / "model.json").read_text())
    doc["widths"][1] = 7
    (tmp_path / "m" / "model.json").write_text(json.dumps(doc))
    with pytest.raises(FedpgmError, match="shape"):
        NGM.load(tmp_path / "m")
    (tmp_path / "m" / "weights.safetensors").write_bytes(b"junk")
    with pytest.raises(FedpgmError, match="has 4 bytes, the model records .*changed or replaced"):
        NGM.load(tmp_path / "m")
    with pytest.raises(FedpgmError, match="not an NGM folder"):
        NGM.load(tmp_path / "nothing")


def test_bad_queries_fail_clearly(chain, chain_model):
    _, test, _, _ = chain
    with pytest.raises(FedpgmError, match="target 'nope' is not in the model"):
        chain_model.predict(test, "nope")
    with pytest.raises(FedpgmError, match="non-numeric"):
        chain_model.predict(pd.DataFrame({"a": ["x", "y"]}), "b")
    with pytest.raises(FedpgmError, match="outside 0..2"):
        chain_model.predict(pd.DataFrame({"k": [5.0]}), "b")
    with pytest.raises(FedpgmError, match="direct or iterative"):
        chain_model.predict(test, "b", mode="magic")
    with pytest.raises(FedpgmError, match="lam"):
        NGMSettings(lam=-1)


def test_revealer_finds_a_numeric_chain_without_a_graph(chain):
    train, _, schema, _ = chain
    numeric = schema.select(["a", "b", "c", "z"])
    model = NGM.fit(train[numeric.names], numeric, None,
                    NGMSettings(hidden=32, epochs=300, revealer=True, sparsity=2 / 6, lam=0.1))
    found = {frozenset(e) for e in model.graph.edges()}
    assert found == {frozenset(("a", "b")), frozenset(("b", "c"))}
    assert model.off_graph_share().max() < 0.5  # the revealed graph is the one the network follows


def test_each_row_is_taught_by_its_own_teacher(chain, chain_model):
    train, test, schema, graph = chain
    other = NGM.fit(train.iloc[:600], schema, graph, NGMSettings(hidden=16, epochs=5, seed=4),
                    layout=chain_model.layout)
    layout = chain_model.layout
    X, seen = (torch.as_tensor(a) for a in layout.encode(test.iloc[:9]))
    inputs, hidden = hide(X, seen, layout, torch.Generator().manual_seed(0))
    owner = np.array([0, 1, -1] * 3)
    got = Teachers([chain_model, other], layout, owner).targets(X, torch.arange(9), inputs, hidden)
    cols = hidden @ torch.as_tensor(layout.membership())
    masked = inputs * (1 - cols) + torch.as_tensor(layout.means()) * cols
    k = layout.blocks[schema.names.index("k")]
    for row, t in enumerate(owner):
        if t < 0:
            torch.testing.assert_close(got[row], X[row])  # untaught: its own values
            continue
        with torch.no_grad():
            want = [chain_model, other][t].net(masked[row:row + 1])[0]
        want[k] = torch.softmax(want[k], dim=0)
        torch.testing.assert_close(got[row], want)
    with pytest.raises(FedpgmError, match="2 teachers need each row's teacher"):
        Teachers([chain_model, other], layout)


def test_teacher_targets_score_every_output_own_values_only_hidden_ones(chain, chain_model):
    _, test, _, _ = chain
    layout = chain_model.layout
    X, seen = (torch.as_tensor(a) for a in layout.encode(test.iloc[:40]))
    owner = np.array([0, -1] * 20)

    class Spy:  # records which outputs the loss scores
        def __init__(self):
            self.layout = layout

        def __call__(self, net, inputs, scored, target):
            self.scored = scored
            return torch.zeros(())

    spy = Spy()
    step_loss(chain_model.net, spy, X, seen, torch.arange(40), torch.Generator().manual_seed(3),
              Teachers([chain_model], layout, owner))
    _, hidden = hide(X, seen, layout, torch.Generator().manual_seed(3))  # the same draw
    taught = torch.as_tensor(owner >= 0)
    assert (hidden[taught] == 0).any()  # some outputs of taught rows had their inputs visible
    seen = seen.float()
    torch.testing.assert_close(spy.scored[taught], seen[taught])
    torch.testing.assert_close(spy.scored[~taught], (seen * hidden)[~taught])


def test_soft_distillation_follows_the_teacher_closer_than_its_samples(chain, chain_model):
    _, test, schema, graph = chain
    samples = chain_model.sample(2000, seed=7)
    settings = NGMSettings(hidden=32, epochs=150, seed=1)
    hard = NGM.fit(samples, schema, graph, settings)
    soft = NGM.fit(samples, schema, graph, settings, teachers=[chain_model])
    teacher = chain_model.predict(test, "b")
    gap_hard = np.abs(hard.predict(test, "b") - teacher).mean()
    gap_soft = np.abs(soft.predict(test, "b") - teacher).mean()
    print(f"distance to the teacher: hard {gap_hard:.4f}, soft {gap_soft:.4f}")
    assert gap_soft < gap_hard
    untaught = NGM.fit(samples, schema, graph, settings, teachers=[chain_model],
                       teacher_of=np.full(len(samples), -1))  # every row keeps its own values
    for a, b in zip(untaught.net.parameters(), hard.net.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
