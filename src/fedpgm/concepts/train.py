"""Local training, module-wise averaging and evaluation of concept models.

Local loss: ``gamma * mean CE over the supervised concepts + (1 - gamma) * CE of the task`` when
the task is supervised (only the concept term otherwise; only the task term without concepts);
labels may be missing per row (code -1) and are then left out. Modules of nodes the client
cannot supervise are frozen. Training-time interventions (CEM's RandInt): per batch, each
concept is replaced by its true value with probability ``p_int`` for the whole batch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import networkx as nx
import numpy as np
import torch
import torch.nn.functional as F

from fedpgm.concepts.models import ENCODER, SCORER, ConceptModel, key, module_of


@dataclass
class TrainSettings:
    """Local training of a concept model: epochs per round, learning rate, batch size, the weight
    ``gamma`` of the concept loss against the task loss, and ``p_int``, the probability that a
    concept is replaced by its true value in a batch (training-time interventions)."""
    epochs: int = 2
    lr: float = 1e-3
    batch_size: int = 512
    gamma: float = 0.8
    p_int: float = 0.25
    seed: int = 0


def trainable_modules(model: ConceptModel, supervised: set[str]) -> list[str]:
    """The averaging units this client updates: the encoder, the scorer if it supervises a
    concept, and the modules of the nodes it supervises (none if it supervises no node)."""
    nodes = [n for n in model.order() if n in supervised]
    if not nodes:
        return []  # nothing to learn from here (e.g. the opaque model at a client without the task)
    out = [ENCODER] + [f"nodes.{key(n)}" for n in nodes]
    if model.scorer is not None and any(n != model.task for n in nodes):
        out.append(SCORER)
    return out


def loss_of(model: ConceptModel, logits: dict, truth: torch.Tensor, columns: list[str],
            gamma: float) -> torch.Tensor | None:
    """The local loss of the module doc; None when the batch has no label at all. Nodes without
    a label in this batch still enter with weight zero, so every module in the computation gets
    a (zero) gradient, which per-sample-gradient DP-SGD requires."""
    concept_terms, task_term, idle = [], None, []
    for i, n in enumerate(columns):
        if n not in logits:
            continue
        y = truth[:, i]
        known = (y >= 0).float()
        ce = (F.cross_entropy(logits[n], y.clamp(min=0), reduction="none") * known).sum() / known.sum().clamp(min=1)
        if not known.any():
            idle.append(ce)
        elif n == model.task:
            task_term = ce
        else:
            concept_terms.append(ce)
    concept = torch.stack(concept_terms).mean() if concept_terms else None
    loss: torch.Tensor | None
    if concept is not None and task_term is not None:
        loss = gamma * concept + (1 - gamma) * task_term
    else:
        loss = concept if concept is not None else task_term
    if loss is None:
        return None
    return loss + 0.0 * sum(idle) if idle else loss


def local_train(model: ConceptModel, x: np.ndarray, codes: np.ndarray, columns: list[str],
                settings: TrainSettings, dp=None) -> list[str]:
    """Train ``model`` in place on rows ``x`` (rows, d) with labels ``codes`` (rows, columns; -1
    missing); returns the units it updated. ``dp``: a ``fedpgm.concepts.privacy.ClientDP`` for
    DP-SGD (per-sample clipping, noise, Poisson batches, accounting)."""
    supervised = {n for i, n in enumerate(columns) if (codes[:, i] >= 0).any() and n in model.cards}
    units = trainable_modules(model, supervised)
    if not units:
        return []
    names, idle = model.module_names(), model.idle_parameters(supervised)
    for name, p in model.named_parameters():
        p.requires_grad_(module_of(name, names) in units and name not in idle)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=settings.lr)
    net: torch.nn.Module = model
    wrapped = None
    if dp is not None:
        wrapped, opt = dp.wrap(model, opt)
        net = wrapped
    gen = torch.Generator().manual_seed(settings.seed)
    X, Y = torch.as_tensor(x), torch.as_tensor(codes, dtype=torch.long)
    is_concept = torch.tensor([n != model.task for n in columns])
    model.train()
    for _ in range(settings.epochs):
        batches = (dp.batches(gen) if dp is not None
                   else torch.randperm(len(X), generator=gen).split(settings.batch_size))
        for idx in batches:
            if len(idx) == 0:
                continue
            mask = (torch.rand(len(columns), generator=gen) < settings.p_int) & is_concept
            logits = net(X[idx], Y[idx], mask.expand(len(idx), -1), columns)
            loss = loss_of(model, logits, Y[idx], columns, settings.gamma)
            if loss is None:
                continue
            opt.zero_grad()
            with warnings.catch_warnings():  # Opacus' hooks on a module fed no grad-requiring input:
                warnings.filterwarnings("ignore", "Full backward hook is firing")  # expected, harmless
                loss.backward()
            opt.step()
            if dp is not None:
                dp.step()
    if wrapped is not None:
        wrapped._close()  # remove Opacus' hooks: the model is plain again
    for p in model.parameters():
        p.requires_grad_(True)
    return units


def average(states: list[tuple[dict, list[str], float]], names: list[str]) -> dict[str, np.ndarray]:
    """Module-wise FedAvg: each parameter averaged, weighted by rows, over the clients whose
    update included its module. ``states``: (arrays, units updated, rows) per client."""
    sums: dict[str, np.ndarray] = {}
    weights: dict[str, float] = {}
    for arrays, units, n in states:
        for k, v in arrays.items():
            if module_of(k, names) in units:
                sums[k] = sums.get(k, 0) + n * v
                weights[k] = weights.get(k, 0) + n
    return {k: (sums[k] / weights[k]).astype(np.float32) for k in sums}


def task_loss(model: ConceptModel, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    with torch.no_grad():
        logits = model(torch.as_tensor(x))[model.task]
        return float(F.cross_entropy(logits, torch.as_tensor(y, dtype=torch.long)))


def depths(dag: nx.DiGraph) -> dict[str, int]:
    """Longest-path depth from the roots."""
    out: dict[str, int] = {}
    for n in nx.topological_sort(dag):
        out[n] = max((out[p] + 1 for p in dag.predecessors(n)), default=0)
    return out


def evaluate(model: ConceptModel, x: np.ndarray, codes: np.ndarray, nodes: list[str], task: str,
             cards: dict[str, int], dag: nx.DiGraph, intervene_depth: int | None = None) -> dict:
    """task accuracy; concept accuracy over every concept of the network (a concept the model
    does not predict counts as a random guess, 1/card); coverage of the task-relevant concepts
    (ancestors of the task in the true DAG) by the model's concepts. ``intervene_depth``: true
    values given for every concept at depth <= it in the true DAG. Label accuracy: the mean
    accuracy over the variables the model predicts (task included) that were not intervened
    on (the paper's Fig. 2)."""
    model.eval()
    X, Y = torch.as_tensor(x), torch.as_tensor(codes, dtype=torch.long)
    mask = None
    if intervene_depth is not None:
        d = depths(dag)
        mask = torch.tensor([n != task and d[n] <= intervene_depth for n in nodes]).expand(len(X), -1)
    with torch.no_grad():
        logits = model(X, Y, mask, nodes)
    col = {n: i for i, n in enumerate(nodes)}
    task_acc = float((logits[task].argmax(1) == Y[:, col[task]]).float().mean())
    accs = []
    for n in nodes:
        if n == task:
            continue
        if n in logits:
            accs.append(float((logits[n].argmax(1) == Y[:, col[n]]).float().mean()))
        else:
            accs.append(1.0 / cards[n])
    intervened = set() if mask is None else {n for n, m in zip(nodes, mask[0].tolist()) if m}
    label = [float((logits[n].argmax(1) == Y[:, col[n]]).float().mean())
             for n in nodes if n in logits and n not in intervened]
    relevant = nx.ancestors(dag, task)
    covered = relevant & set(model.concepts)
    return {"task_accuracy": task_acc, "concept_accuracy": float(np.mean(accs)),
            "label_accuracy": float(np.mean(label)),
            "coverage": len(covered) / len(relevant) if relevant else 1.0}
