"""F-CMs through fedpgm's runtime: client handlers and the server's rounds.

Client (``HANDLERS``, name ``concepts``): a client's table holds the input-code columns
``input:0..`` and the node columns it can label (codes, NaN where a row is unlabelled); its
concept graph is ``meta["concept_graph"]`` and, optionally, its edge-confidence matrix
``meta["concept_confidence"]`` (``{"edges": [[i, j, S_ij], ...]}``). ``describe`` sends those
(the graph an edge list over the nodes it can label) and its number of rows; ``train``
rebuilds the model from the server's architecture (JSON) and weights, trains the modules it can
supervise for a few epochs and sends back those modules' weights only. Rows never leave.

Server (``run_rounds``): the pool of clients grows at ``join_round``; each round samples
``per_round`` joined clients, collects their module updates and averages module by module
(only over the clients that trained a module; the encoder over all). Where the shared graph
comes from (``graph_rounds``): ``"join"`` (this project's default) aggregates the graphs of all
joined clients before round 1 and at the join; ``"round"`` (the paper's Algorithm 1)
aggregates, at every round, the graphs of that round's sampled clients K_t, pairs none of them
observes keeping their last state. The vote (``graph_votes``): ``"adjacency"`` (S = A, what the
paper's experiments send) or ``"confidence"`` (every client sends S; one that does not is
refused). When the graph changes, the regime decides: ``fcm`` adapts the architecture (new
modules, re-wired parents, existing weights kept); ``static`` keeps the first round's concept
set and architecture; ``reinit`` rebuilds the model from scratch on the new graph at the join.
Early stopping on the validation task loss (patience) only counts rounds after the last join;
with per-round graphs it keeps a copy of the best round's whole model (its architecture may
differ from the last round's) and returns that.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from fedpgm.concepts.graphs import aggregate, confidence_from_doc, from_edge_list
from fedpgm.concepts.models import SPEC, ConceptModel, arrays, load_arrays, module_of
from fedpgm.concepts.privacy import DP_SCOPES, ClientDP, DPSettings
from fedpgm.concepts.train import TrainSettings, average, local_train, task_loss
from fedpgm.early_stopping import EarlyStopping
from fedpgm.data.policy import PolicyRefusal
from fedpgm.errors import FedpgmError
from fedpgm.federation.apps import check_backend
from fedpgm.federation.codec import Message
from fedpgm.federation.contract import NOTHING, Array, Contract, Fields, Float, Int, Maybe
from fedpgm.federation.handlers import DP_HISTORY, ClientContext, HandlerSet
from fedpgm.federation.shares import SECURE, own_fraction, secure_weighted_mean, weighted_share

HANDLERS = HandlerSet("concepts")
REGIMES = ("centralized", "local", "static", "fcm", "reinit")
FEDERATED_REGIMES = ("static", "fcm", "reinit")  # those that train across the clients (any backend)
X_PREFIX = "input:"  # input-code columns: input:0, input:1, ...


GRAPH = "concept_graph"  # a client's concept graph (edge list) in its ClientData.meta
CONFIDENCE = "concept_confidence"  # optionally, its edge-confidence matrix S^(k) (ClientData.meta)
GRAPH_ROUNDS = ("join", "round")  # when the server aggregates the client graphs
GRAPH_VOTES = ("adjacency", "confidence")  # what each client's vote is


def split_table(frame, task: str | None = None):
    """(inputs (rows, d) float32, codes (rows, nodes) int with -1 for missing, node names)."""
    xcols = [c for c in frame.columns if c.startswith(X_PREFIX)]
    nodes = [c for c in frame.columns if c not in xcols]
    codes = np.array(frame[nodes], dtype=float)
    return (np.array(frame[xcols], dtype=np.float32),
            np.where(np.isnan(codes), -1, codes).astype(np.int64), nodes)


# A train request: the model as a spec the client rebuilds with the family's constructor and its
# weights; local training settings bounded (sizes, epochs); DP settings the policy may lower.
TRAIN = Contract({"spec": SPEC,
                  "settings": Fields({"epochs": Int(1, 1000), "lr": Float(1e-7, 10.0), "batch_size": Int(1, 1 << 20),
                                      "gamma": Float(0.0, 1.0), "p_int": Float(0.0, 1.0), "seed": Int(0, 2**63 - 1)}),
                  "dp": Maybe(Fields({"epsilon": Float(1e-6, 1e6), "total_epochs": Int(1, 10**6),
                                      "delta": Float(1e-12, 0.5), "max_grad_norm": Float(1e-6, 1e3)},
                                     required=("epsilon", "total_epochs"))),
                  "secure": SECURE},
                 required=("spec", "settings"), arrays={"*": Array("f")}, update=True,
                 sent_model=True, dp=True)


@HANDLERS.query("describe", NOTHING)
def describe(request: Message, ctx: ClientContext) -> Message:
    graph = ctx.data.meta.get(GRAPH)
    if not graph:
        raise FedpgmError(f"client '{ctx.client_id}' has no concept graph; give each client one")
    _, codes, nodes = split_table(ctx.data.train)
    if not (codes >= 0).any():
        raise FedpgmError(f"client '{ctx.client_id}' has neither concept nor task labels; it cannot "
                          "train any module")
    config = {"graph": graph, "n_rows": len(ctx.data.train), "nodes": nodes}
    if ctx.data.meta.get(CONFIDENCE) is not None:
        config["confidence"] = ctx.data.meta[CONFIDENCE]
    return Message("describe", config=config)


@HANDLERS.train("train", TRAIN)
def train(request: Message, ctx: ClientContext) -> Message:
    cfg = request.config
    x, codes, nodes = split_table(ctx.data.train)
    if cfg["spec"]["input_dim"] != x.shape[1]:
        raise PolicyRefusal(f"client '{ctx.client_id}' has {x.shape[1]} inputs; the model sent takes "
                            f"{cfg['spec']['input_dim']}")
    model = ConceptModel.from_spec(cfg["spec"])
    load_arrays(model, dict(request.arrays))
    settings = TrainSettings(**cfg["settings"])
    dp = None
    wanted, notes = ctx.policy.dp(cfg.get("dp"), ctx.client_id)  # the client's floor, not the server's
    ctx.notes.extend(notes)
    if wanted:
        dp = ClientDP(DPSettings(**wanted), len(x), settings.batch_size, ctx.state.get(DP_HISTORY))
    t0 = time.process_time()
    units = local_train(model, x, codes, nodes, settings, dp)
    reply = {"units": units, "n_rows": len(x), "seconds": time.process_time() - t0}
    if dp is not None:
        budget, spent = ctx.policy.max_epsilon, dp.epsilon(ctx.earlier_dp)
        if budget is not None and spent > budget * (1 + 1e-9):  # nothing leaves: nothing spent
            runs = " over this and the node's earlier runs" if ctx.earlier_dp else ""
            raise PolicyRefusal(f"client '{ctx.client_id}' has spent its privacy budget (epsilon {spent:.3g} > "
                                f"{budget} with this update{runs}); it trains no more")
        ctx.state[DP_HISTORY] = dp.history
        reply["epsilon"] = dp.epsilon()
        reply["epsilon_update"] = dp.update_epsilon(settings.epochs * dp.steps_per_epoch)
    if "secure" in cfg:  # a share of a secure sum: the server sees only the sum over clients
        state = arrays(model)
        return Message("train", weighted_share(state, own_fraction(cfg["secure"], len(x), ctx),
                                               module_groups(model, state), set(units)), reply)
    return Message("train", arrays(model, units), reply)


@dataclass
class RoundSettings:
    """Federated rounds of a concept model: the model kind, the regime (centralized, local,
    static, fcm, reinit), rounds, clients per round, the join round, early stopping, local
    training, DP and secure aggregation, and the graph-aggregation protocol."""
    kind: str = "cgm"
    regime: str = "fcm"
    rounds: int = 200
    per_round: int = 10
    join_round: int = 10
    patience: int = 10
    train: TrainSettings = field(default_factory=TrainSettings)
    hidden: int = 64
    emb: int = 16
    seed: int = 0
    dp_epsilon: float | None = None  # DP-SGD on every client update (Opacus), delta 1e-5, clip 1.0
    dp_delta: float = 1e-5
    dp_scope: str = "training"  # calibrate the noise to the whole training or to each update (privacy.py)
    min_clients: int | None = None  # a round goes on with this many of its chosen clients (None: all)
    secure_aggregation: bool = False  # module averages by SecAgg+ (Flower backend; fedpgm.federation.secagg)
    graph_rounds: str = "join"  # "round": the paper's per-round aggregation over the sampled clients
    graph_votes: str = "adjacency"  # "confidence": votes weighted by the clients' S^(k)

    def check(self, backend: str) -> "RoundSettings":
        """``self`` when its rules hold on ``backend``, else a one-line ``FedpgmError``: the one
        place they are stated (``concepts fit``'s settings and ``FederatedCM`` both ask it)."""
        if self.regime not in REGIMES:
            raise FedpgmError(f"unknown regime '{self.regime}'; use one of {', '.join(REGIMES)}")
        if check_backend(backend) != "inprocess" and self.regime not in FEDERATED_REGIMES:
            raise FedpgmError(f"the {self.regime} regime trains in one place; the {backend} backend is for "
                              f"{', '.join(FEDERATED_REGIMES)}")
        if self.dp_scope not in DP_SCOPES:
            raise FedpgmError(f"unknown DP scope '{self.dp_scope}'; use one of {DP_SCOPES}")
        if not self.train.lr > 0:
            raise FedpgmError(f"--lr {self.train.lr}: the learning rate must be positive (e.g. 1e-3)")
        if self.secure_aggregation and backend == "inprocess":
            raise FedpgmError("secure aggregation runs on the Flower backend only (SecAgg+ needs separate parties "
                              "holding their own keys); use the flower backend (--backend flower)")
        if self.secure_aggregation and self.per_round < 2:
            raise FedpgmError("secure aggregation needs at least 2 clients per round (3 to survive a dropout)")
        return self


def changed_fraction(before: dict[str, torch.Tensor], model: ConceptModel) -> float:
    """Share of the model's parameters that are new or differ from ``before``."""
    after = model.state_dict()
    total = sum(v.numel() for v in after.values())
    changed = sum(v.numel() if k not in before or before[k].shape != v.shape
                  else int((before[k] != v).sum()) for k, v in after.items())
    return changed / total


def run_rounds(fed, initial: list[str], late: list[str], cards: dict[str, int], task: str,
               input_dim: int, val: tuple[np.ndarray, np.ndarray], s: RoundSettings, progress=None) -> dict:
    """The server's loop (module doc). ``val``: (inputs, task codes) for the validation loss."""
    if s.regime not in ("static", "fcm", "reinit"):
        raise FedpgmError(f"run_rounds runs the federated regimes, not '{s.regime}'")
    if s.per_round > len(initial) + len(late):
        raise FedpgmError(f"--per-round {s.per_round} exceeds the {len(initial) + len(late)} clients; lower it")
    if s.graph_rounds not in GRAPH_ROUNDS or s.graph_votes not in GRAPH_VOTES:
        raise FedpgmError(f"graph_rounds must be one of {GRAPH_ROUNDS} and graph_votes one of {GRAPH_VOTES}, "
                          f"got '{s.graph_rounds}', '{s.graph_votes}'")
    rng = np.random.default_rng(s.seed)
    info = {c: m.config for c, m in fed.broadcast("describe", clients=initial).require_all().items()}

    def merged(cs: list[str], previous=None):
        graphs = [from_edge_list(info[c]["graph"], set(cards), f"client '{c}'") for c in cs]
        return aggregate(graphs, [info[c]["n_rows"] for c in cs], task, s.seed,
                         confidences_of(info, cs, graphs) if s.graph_votes == "confidence" else None, previous)

    def choose() -> list[str]:
        pool = sorted(info)
        return sorted(rng.choice(pool, size=min(s.per_round, len(pool)), replace=False).tolist())

    per_round_graph = s.graph_rounds == "round"
    chosen: list[str] = choose() if per_round_graph else []  # the paper: round 1's graph is K_1's
    agg = merged(chosen if per_round_graph else sorted(info))
    model = ConceptModel(s.kind, input_dim, cards, agg.graph, task, s.hidden, s.emb, s.seed)
    history: list[dict] = []
    joins: list[dict] = []
    graph_changes: list[dict] = []
    spent: dict[str, float] = {}
    per_update: dict[str, float] = {}
    stop = EarlyStopping(model, s.patience, keep_module=per_round_graph)
    for r in range(1, s.rounds + 1):
        join: dict[str, Any] | None = None
        if r == s.join_round and late:
            fed.admit(late)  # on Flower, the late clients' SuperNodes connect now
            info.update({c: m.config for c, m in fed.broadcast("describe", clients=late).require_all().items()})
            before = {k: v.clone() for k, v in model.state_dict().items()}
            join = {"round": r, "clients": len(info)}
            if s.regime == "fcm" and not per_round_graph:
                agg = merged(sorted(info))
                join.update(model.adapt(agg.graph, cards))
                join["removed_edges"] = agg.removed
            elif s.regime == "reinit":
                agg = merged(sorted(info), agg if per_round_graph else None)
                model = ConceptModel(s.kind, input_dim, cards, agg.graph, task, s.hidden, s.emb, s.seed + r)
            stop = EarlyStopping(model, s.patience, keep_module=per_round_graph)  # compare from the join on
        if r > 1 or not per_round_graph:
            chosen = choose()
        if per_round_graph and r > 1 and s.regime == "fcm":  # Algorithm 1: G_t from K_t's graphs
            new = merged(chosen, agg)
            if set(new.graph.edges()) != set(agg.graph.edges()) or set(new.graph) != set(agg.graph):
                change = model.adapt(new.graph, cards)
                graph_changes.append({"round": r, "edges": sorted([u, v] for u, v in new.graph.edges()), **change})
                if join is not None:
                    join.update(change)
            agg = new
        if join is not None:
            join["fraction_params_changed"] = changed_fraction(before, model)
            joins.append(join)
        cfg = {"spec": model.spec(), "settings": asdict(s.train) | {"seed": s.seed * 1000 + r}}
        if s.dp_epsilon is not None:
            epochs = s.train.epochs if s.dp_scope == "update" else s.rounds * s.train.epochs
            cfg["dp"] = asdict(DPSettings(s.dp_epsilon, epochs, s.dp_delta))
        quorum = None if s.min_clients is None else min(s.min_clients, len(chosen))
        if s.secure_aggregation:
            update, replies = secure_round(fed, model, cfg, chosen, {c: info[c]["n_rows"] for c in chosen}, quorum)
        else:
            answered = fed.broadcast("train", arrays(model), cfg, clients=chosen).require(quorum)
            replies = {c: m.config for c, m in answered.items()}
            update = average([(dict(m.arrays), m.config["units"], m.config["n_rows"]) for m in answered.values()],
                             model.module_names())
        load_arrays(model, update)
        loss = task_loss(model, *val)
        history.append({"round": r, "val_task_loss": loss, "clients": sorted(replies)})
        for c, config in replies.items():
            if "epsilon" in config:
                spent[c] = config["epsilon"]
                per_update[c] = max(per_update.get(c, 0.0), config["epsilon_update"])
        if progress is not None:
            progress(r, loss)
        if (r >= s.join_round or not late) and stop.update(loss):
            break
    best = stop.restore()  # (per-round graphs: the best round's model, in that round's architecture)
    assert isinstance(best, ConceptModel)
    model = best
    return {"model": model, "history": history, "joins": joins, "graph": model.graph, "graph_changes": graph_changes,
            "removed_edges": agg.removed, "epsilon_spent": spent, "epsilon_per_update": per_update,
            "left_out": fed.left_out_report()}


def confidences_of(info: dict, clients: list[str], graphs: list) -> list[dict]:
    """Each client's edge-confidence matrix S^(k) from its ``describe`` reply; a client that sent
    none is refused (graph_votes="confidence" weighs every vote by one)."""
    missing = [c for c in clients if "confidence" not in info[c]]
    if missing:
        raise FedpgmError(f"client(s) {missing} sent no edge-confidence matrix; with graph_votes='confidence' "
                          f"every client sends one (ClientData.meta['{CONFIDENCE}']), or use graph_votes='adjacency'")
    return [confidence_from_doc(info[c]["confidence"], g, f"client '{c}'") for c, g in zip(clients, graphs)]


def secure_round(fed, model: ConceptModel, cfg: dict, chosen: list[str], rows: dict[str, int],
                 quorum: int | None) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """One round whose module averages the server learns by SecAgg+ only: each client adds its
    parameters times its share of the round's rows, module by module (``weighted_share``); the
    update, and each survivor's reply config."""
    state = arrays(model)
    update, replies = secure_weighted_mean(fed, "train", state, cfg, rows, module_groups(model, state))
    if len(replies) < (len(chosen) if quorum is None else quorum):
        raise FedpgmError(f"only {len(replies)} of {len(chosen)} clients completed the secure round "
                          f"(needed {len(chosen) if quorum is None else quorum}); see left_out")
    return update, replies


def module_groups(model: ConceptModel, state: dict) -> dict[str, str]:
    """Each parameter's module: the unit a client trains, and averages are taken over."""
    names = model.module_names()
    return {k: module_of(k, names) for k in state}


def train_alone(model: ConceptModel, x: np.ndarray, codes: np.ndarray, nodes: list[str],
                val: tuple[np.ndarray, np.ndarray], s: RoundSettings) -> list[dict]:
    """Centralized / local training: epochs of ``local_train`` with the same early stopping."""
    history, stop = [], EarlyStopping(model, s.patience)
    for r in range(1, s.rounds + 1):
        one_epoch = TrainSettings(**(asdict(s.train) | {"epochs": 1, "seed": s.seed * 1000 + r}))
        local_train(model, x, codes, nodes, one_epoch)
        loss = task_loss(model, *val)
        history.append({"round": r, "val_task_loss": loss})
        if stop.update(loss):
            break
    stop.restore()
    return history
