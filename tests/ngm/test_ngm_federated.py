import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import SCHEMA, chain_frame

from fedpgm.data import ClientData
from fedpgm.data.policy import ClientPolicy
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation
from fedpgm.federation.privacy import PrivacyAudit
from fedpgm.ngm.graph import from_edges
from fedpgm.ngm.layout import Layout
from fedpgm.ngm.train import NGMSettings, Objective
from fedpgm.ngm.server import fit_fedngm
from fedpgm.ngm.stitch import stitch, widen

HANDLERS = "fedpgm.ngm.client:HANDLERS"
FAST = NGMSettings(hidden=24, epochs=60, seed=0)


def with_w(frame, seed):
    """``frame`` plus w = c + 0.8 b + small noise: what c adds to b, known only to one client."""
    return frame.assign(w=frame["c"] + 0.8 * frame["b"] + np.random.default_rng(seed).normal(0, 0.1, len(frame)))


def clients(n_rows=(900, 900, 900), extra=True):
    """Three clients: the chain's features, client-0 also holds w (c's noise given b)."""
    out = []
    for k, n in enumerate(n_rows):
        frame = chain_frame(n, seed=10 + k)
        schema = SCHEMA
        if extra and k == 0:
            frame["w"] = with_w(frame, k)["w"]
            schema = Schema(SCHEMA.features + (Feature("w", "continuous"),))
        frame.index.name = "row_id"
        cut = int(0.8 * n)
        out.append(ClientData(f"client-{k}", schema, frame.iloc[:cut], frame.iloc[cut:]))
    return out


def test_fedngm_releases_a_global_model_and_no_message_carries_rows():
    parts = clients()
    audit = PrivacyAudit(parts)
    with InProcessFederation(parts, HANDLERS, mode="sequential", audit=audit) as fed:
        result = fit_fedngm(fed, settings=FAST, min_clients=3)
        assert result.released and result.global_model is not None
        assert result.global_model.names == SCHEMA.names  # the shared features only
        assert set(result.merged.edges()) >= {("b", "c")} or result.merged.has_edge("b", "c")
        replies = fed.broadcast("stitch", config={"targets": ["c"], "settings": {"epochs": 300, "patience": 30}},
                                clients=["client-0"]).require_all()
    assert audit.checked >= 4 * 3  # describe, graph, fit, release (+ stitch) from every client
    m = replies["client-0"].config["metrics"]["c"]
    assert m["stitched"]["mae"] < 0.8 * m["global"]["mae"]  # w (c's noise) is client-0's extra feature
    test = chain_frame(800, seed=99)
    def mae(model):
        return np.abs(model.predict(test, "b") - test["b"]).mean()

    clients_mae = np.mean([mae(m) for m in result.client_models.values()])
    print(f"MAE of b: global {mae(result.global_model):.4f}, mean client {clients_mae:.4f}")
    assert mae(result.global_model) < 1.1 * clients_mae  # learned from samples only, as well as the clients
    assert mae(result.global_model) < 0.6 * np.abs(test["b"] - test["b"].mean()).mean()


def test_release_is_refused_below_the_threshold():
    with InProcessFederation(clients((900, 900, 1)), HANDLERS, mode="sequential") as fed:
        # a client of fewer rows than its policy's min_rows answers nothing, not even describe
        assert "min_rows is 10" in fed.send("client-2", "describe").failures["client-2"].detail
    parts = clients()
    parts[2].policy = ClientPolicy(max_requests=2)  # client-2 answers describe and graph, then no fit
    with InProcessFederation(parts, HANDLERS, mode="sequential") as fed:
        result = fit_fedngm(fed, settings=FAST, min_clients=3)
    assert not result.released and result.global_model is None
    assert "only 2 client(s) contributed" in result.refusal and len(result.client_models) == 2
    with pytest.raises(FedpgmError, match="between 1 and the number of clients"):
        with InProcessFederation(clients(), HANDLERS, mode="sequential") as fed:
            fit_fedngm(fed, settings=FAST, min_clients=4)


def test_clients_without_common_features_are_refused():
    a = ClientData("client-0", Schema((Feature("x", "continuous"),)),
                   pd.DataFrame({"x": np.arange(10.0)}).rename_axis("row_id"))
    b = ClientData("client-1", Schema((Feature("y", "continuous"),)),
                   pd.DataFrame({"y": np.arange(10.0)}).rename_axis("row_id"))
    with InProcessFederation([a, b], HANDLERS, mode="sequential") as fed:
        with pytest.raises(FedpgmError, match="no feature in common"):
            fit_fedngm(fed, settings=FAST)


def test_stitched_model_starts_as_the_global_one_and_keeps_its_weights_frozen(chain_model):
    torch.manual_seed(0)
    frame = with_w(chain_frame(1500, seed=5), 0)
    schema = Schema(SCHEMA.features + (Feature("w", "continuous"),))
    graph = from_edges(schema.names, [["w", "b"], ["w", "c"]])
    full = Layout(schema, {**chain_model.layout.stats, **Layout.fit(frame, Schema(schema.features[-1:])).stats})
    wide_graph = nx.compose(chain_model.graph, graph)
    wide, _ = widen(chain_model.net, full, wide_graph, units_per_feature=3, seed=1)
    x = torch.randn(50, chain_model.layout.width)
    extra = torch.randn(50, 1)
    with torch.no_grad():
        before = chain_model.net(x)
        after = wide(torch.cat([x, extra], 1))[:, : chain_model.layout.width]
    assert torch.allclose(before, after, rtol=1e-5, atol=1e-5)  # the global outputs, up to float32 rounding
    stitched = stitch(chain_model, frame, schema, graph, NGMSettings(hidden=32, epochs=40))
    D = chain_model.layout.width
    for old, new in zip(chain_model.net.weights, stitched.net.weights):
        o, i = old.shape
        assert torch.equal(old.detach(), new.detach()[:o, :i])  # frozen blocks did not move
    assert stitched.graph.has_edge("w", "b") and stitched.names[-1] == "w"
    # the new paths follow the stitched graph: off-graph strength (self included) is the global model's
    off = {m: Objective(m.layout, m.graph, False, 0.0) for m in (chain_model, stitched)}
    with torch.no_grad():
        off = {m: o.feature_paths(m.net) * o.outside for m, o in off.items()}
    F = len(chain_model.names)
    assert torch.allclose(off[stitched][:F, :F], off[chain_model], rtol=1e-4, atol=1e-6)
    assert float(off[stitched][F].sum()) == 0.0 and float(off[stitched][:, F].sum()) == 0.0
    test = with_w(chain_frame(800, seed=6), 1)
    err_global = np.abs(chain_model.predict(test[SCHEMA.names], "c") - test["c"]).mean()
    err_stitched = np.abs(stitched.predict(test, "c") - test["c"]).mean()
    assert err_stitched < 0.8 * err_global and stitched.layout.width == D + 1
