"""Item 5 of the security issue: a coordinator that crafts the F-CM it sends reads rows back from
one plain update, and a client whose policy requires DP (``max_epsilon``) gives it none; nor
through FedAvg, which has no DP training and which such a client does not answer.

The crafted model (the "binning" attack, Fowl et al. 2022, "Robbing the Fed"): every encoder unit
j measures the same direction a of the inputs with its own threshold c_j, and every downstream
column reading the units is the same and tiny, so that (a) a row's gradient is the same for
every unit it passes, and (b) Adam's first step, lr * g / (|g| + 1e-8), is linear in g. Two
neighbouring units then differ by exactly the rows whose a.x falls between their thresholds; a
bin holding one row gives that row: (dW_j - dW_j+1) / (db_j - db_j+1). docs/security.md says so
("Neural updates without DP"): only DP bounds what an update reveals.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch

from fedpgm.baselines import fedavg
from fedpgm.baselines.tabular import get_weights, mlp
from fedpgm.concepts.federation import HANDLERS
from fedpgm.concepts.models import ConceptModel, arrays
from fedpgm.data.partition import ClientData
from fedpgm.data.policy import ClientPolicy, PolicyRefusal
from fedpgm.data.schema import Feature, Schema
from fedpgm.federation.codec import Message
from fedpgm.federation.handlers import ClientContext

INPUTS, ROWS, UNITS = 6, 120, 256
ADAM_EPS = 1e-8  # torch.optim.Adam's default eps: the attack's linear regime is |g| << eps
SETTINGS = {"epochs": 1, "lr": 10.0, "batch_size": 4096, "gamma": 0.8, "p_int": 0.0, "seed": 0}


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, INPUTS)).astype(np.float32)
    c = (x[:, 0] + rng.normal(0, 0.5, ROWS) > 0).astype(int)
    y = (x[:, 1] + c + rng.normal(0, 0.5, ROWS) > 0.5).astype(int)
    frame = pd.DataFrame({**{f"input:{i}": x[:, i] for i in range(INPUTS)}, "c": c, "y": y})
    schema = Schema(tuple([Feature(f"input:{i}", "continuous") for i in range(INPUTS)]
                          + [Feature("c", "categorical", (0, 1)), Feature("y", "categorical", (0, 1))]))
    return x, frame, schema


def binning(first: torch.nn.Linear, after: torch.nn.Linear, seed: int = 1) -> None:
    """Craft ``first`` (inputs -> UNITS) to bin one direction of the inputs and ``after`` (UNITS ->
    UNITS) to read every unit alike, tiny, and in its activation's linear part."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=INPUTS)
    a /= np.linalg.norm(a)
    cuts = np.quantile(rng.normal(size=100_000), np.linspace(0.001, 0.999, UNITS))  # a guess of a.x's law
    with torch.no_grad():
        first.weight[:] = torch.tensor(np.tile(a * 1e-2, (UNITS, 1)), dtype=torch.float32)
        first.bias[:] = torch.tensor(-cuts * 1e-2, dtype=torch.float32)
        after.weight[:] = torch.full((UNITS, 1), 1e-11).expand(UNITS, UNITS)
        after.bias[:] = 1.0


def crafted_model(seed: int = 1) -> dict[str, np.ndarray]:
    """The coordinator's F-CM: binning encoder, identical tiny columns downstream."""
    model = ConceptModel("cgm", INPUTS, {"c": 2, "y": 2}, nx.DiGraph([("c", "y")]), "y", hidden=UNITS, emb=4)
    binning(model.encoder[0], model.nodes["c"].inp, seed)
    return arrays(model)


def rows_read_back(x: np.ndarray, sent: dict, reply: Message, first: str = "encoder.0", lr: float = SETTINGS["lr"]
                   ) -> int:
    """How many of the client's rows the coordinator recovers to 1e-3 relative error from the
    step Adam took on the crafted layer ``first``."""
    step = lambda k: -(reply.arrays[k].astype(np.float64) - sent[k]) * ADAM_EPS / lr  # noqa: E731
    g_w, g_b = step(f"{first}.weight"), step(f"{first}.bias")
    found = set()
    for j in range(UNITS - 1):
        db = g_b[j] - g_b[j + 1]
        if abs(db) > 1e-30:
            guess = (g_w[j] - g_w[j + 1]) / db
            err = np.linalg.norm(x - guess, axis=1) / np.linalg.norm(x, axis=1)
            if err.min() < 1e-3:
                found.add(int(err.argmin()))
    return len(found)


def train_reply(frame, schema, policy: ClientPolicy, sent: dict, dp: dict | None = None,
                ctx: ClientContext | None = None) -> Message:
    ctx = ctx or ClientContext("client-0", ClientData("client-0", schema, frame, None, {}, policy), None)
    config = {"spec": ConceptModel("cgm", INPUTS, {"c": 2, "y": 2}, nx.DiGraph([("c", "y")]), "y",
                                   hidden=UNITS, emb=4).spec(), "settings": SETTINGS}
    return HANDLERS.handle(Message("train", sent, {**config, **({"dp": dp} if dp else {})}), ctx)


def test_a_crafted_model_reads_rows_from_a_plain_update_under_the_default_policy(table):
    """The limit docs/security.md states: without DP, one update gives rows away."""
    x, frame, schema = table
    sent = crafted_model()
    recovered = rows_read_back(x, sent, train_reply(frame, schema, ClientPolicy(), sent))
    print("rows recovered, default policy:", recovered, "of", ROWS)
    assert recovered >= ROWS // 4


def test_a_policy_requiring_dp_gives_the_crafted_model_no_row(table):
    x, frame, schema = table
    sent = crafted_model()
    dp_policy = ClientPolicy(max_epsilon=1.0)
    with pytest.raises(PolicyRefusal, match="epsilon"):  # a plain request is refused outright
        train_reply(frame, schema, dp_policy, sent)
    reply = train_reply(frame, schema, dp_policy, sent, {"epsilon": 1.0, "total_epochs": 1})
    assert reply.config["epsilon"] <= 1.0 + 1e-9
    assert rows_read_back(x, sent, reply) == 0


def test_a_new_run_does_not_reset_the_clients_dp_budget(table):
    """The coordinator spends the client's budget in one run and starts another: the node's
    spending from its earlier runs (``fedpgm.federation.spending``) counts, and the client trains
    no more; in a run of its own the same request is answered."""
    x, frame, schema = table
    sent = crafted_model()
    policy = ClientPolicy(max_epsilon=1.0)
    dp = {"epsilon": 1.0, "total_epochs": 1}
    first = ClientContext("client-0", ClientData("client-0", schema, frame, None, {}, policy), None)
    assert train_reply(frame, schema, policy, sent, dp, first).config["epsilon"] == pytest.approx(1.0, rel=0.05)
    later = ClientContext("client-0", ClientData("client-0", schema, frame, None, {}, policy), None,
                          earlier_dp=first.state["dp_history"])
    with pytest.raises(PolicyRefusal, match=r"has spent its privacy budget \(epsilon .* > 1.0 with this update "
                                            r"over this and the node's earlier runs\); it trains no more"):
        train_reply(frame, schema, policy, sent, dp, later)
    assert "dp_history" not in later.state  # nothing left, nothing recorded


def fedavg_reply(frame, schema, policy: ClientPolicy, sent: dict) -> Message:
    ctx = ClientContext("client-0", ClientData("client-0", schema, frame, None, {}, policy), None)
    config = {"stats": {f"input:{i}": [0.0, 1.0] for i in range(INPUTS)}, "epochs": 1, "lr": SETTINGS["lr"],
              "batch_size": 4096, "hidden": UNITS, "layers": 2, "arch": "mlp", "seed": 0}
    return fedavg.HANDLERS.handle(Message("train", sent, config), ctx)


def test_fedavg_gives_rows_to_a_crafted_model_and_a_client_requiring_dp_does_not_answer_it(table):
    """FedAvg trains the weights it is sent, with no DP: the same binning reads rows from its
    update under the default policy, and a policy with ``max_epsilon`` refuses the request before
    it trains (``Contract.sent_model``), where before it answered in the clear."""
    x, frame, schema = table
    frame = frame.drop(columns="c")
    schema = Schema(tuple(schema[n] for n in schema.names if n != "c"), label="y")
    net = mlp(INPUTS, 2, UNITS, 2)
    binning(net[0], net[2])
    sent = get_weights(net)
    recovered = rows_read_back(x, sent, fedavg_reply(frame, schema, ClientPolicy(), sent), first="0")
    print("rows recovered through FedAvg, default policy:", recovered, "of", ROWS)
    assert recovered >= ROWS // 4
    with pytest.raises(PolicyRefusal, match="trains a model it is sent only under differential privacy"):
        fedavg_reply(frame, schema, ClientPolicy(max_epsilon=1.0), sent)
