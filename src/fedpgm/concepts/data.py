"""Concept data as in the F-CM paper (App. B/D): a Bayesian network sampled, a task node, every
other node a (categorical) concept, and inputs that hide the concepts.

Inputs x are the latent code of a small autoencoder (2 encoder + 2 decoder layers, MSE) of the
one-hot concept vector (the task excluded), mixed 50/50 with Gaussian noise and standardised;
so x carries the concepts' information only partly and through a learned code. Splits 70/10/20
by seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import pandas as pd
import torch
from torch import nn

from fedpgm.data import load_dataset
from fedpgm.errors import FedpgmError

ROWS = {"asia": 15_000, "sachs": 15_000, "alarm": 10_000, "insurance": 20_000, "hailfinder": 20_000}
LATENT = {"asia": 32, "sachs": 32}  # 64 otherwise


@dataclass
class ConceptData:
    """Codes of every node (rows, nodes), the inputs (rows, latent), the split and the DAG."""

    network: str
    task: str
    nodes: list[str]  # concepts in network order, then the task
    cards: dict[str, int]
    states: dict[str, tuple[str, ...]]
    codes: np.ndarray  # (rows, nodes) int
    x: np.ndarray  # (rows, latent) float32
    split: np.ndarray  # (rows,) 0 train, 1 validation, 2 test
    dag: nx.DiGraph

    @property
    def concepts(self) -> list[str]:
        return [n for n in self.nodes if n != self.task]

    def part(self, which: int) -> np.ndarray:
        return np.flatnonzero(self.split == which)


def one_hot(codes: np.ndarray, cards: list[int]) -> np.ndarray:
    """(rows, sum(cards)) one-hot of integer codes (rows, columns)."""
    blocks = [np.eye(k, dtype=np.float32)[codes[:, j]] for j, k in enumerate(cards)]
    return np.concatenate(blocks, axis=1)


def autoencode(v: np.ndarray, latent: int, seed: int, epochs: int = 30) -> np.ndarray:
    """Latent codes (rows, latent) of an autoencoder Linear-LeakyReLU-Linear / Linear-LeakyReLU-
    Linear trained with MSE on ``v`` (Adam, batch 512)."""
    torch.manual_seed(seed)
    d, h = v.shape[1], max(latent, 2 * latent)
    enc = nn.Sequential(nn.Linear(d, h), nn.LeakyReLU(), nn.Linear(h, latent))
    dec = nn.Sequential(nn.Linear(latent, h), nn.LeakyReLU(), nn.Linear(h, d))
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)
    V = torch.as_tensor(v)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(V), generator=gen).split(512):
            loss = ((dec(enc(V[idx])) - V[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return enc(V).numpy()


def standardise(z: np.ndarray) -> np.ndarray:
    """Each column to mean 0, standard deviation 1."""
    return (z - z.mean(0)) / np.maximum(z.std(0), 1e-6)


def make_concept_data(network: str, task: str | None = None, rows: int | None = None,
                      seed: int = 0, latent: int | None = None, noise: float = 0.5) -> ConceptData:
    """Sample ``bn:network``, build the inputs and the 70/10/20 split (see the module doc)."""
    ds = load_dataset(f"bn:{network}", rows=rows or ROWS.get(network, 10_000), seed=seed,
                      test_size=0.2, **({"label": task} if task else {}))
    task = ds.schema.label
    if task is None:
        raise FedpgmError(f"network '{network}' has no default task; choose one with --task NODE")
    frame = pd.concat([ds.train, ds.test]).sort_index()
    concepts = [n for n in ds.schema.names if n != task]
    nodes = concepts + [task]
    cards = {n: ds.schema[n].cardinality for n in nodes}
    codes = frame[nodes].to_numpy(dtype=int)
    v = one_hot(codes[:, :-1], [cards[n] for n in concepts])
    z = autoencode(v, latent or LATENT.get(network, 64), seed)
    rng = np.random.default_rng(seed)
    z = standardise(z)  # signal and noise in equal units, so "50/50" means equal variance shares
    z = standardise((1 - noise) * z + noise * rng.normal(size=z.shape).astype(np.float32))
    split = rng.choice(3, size=len(codes), p=[0.7, 0.1, 0.2])
    return ConceptData(network, task, nodes, cards, {n: ds.schema[n].states for n in nodes},
                       codes, z.astype(np.float32), split, ds.graph)


def bayes_task_accuracy(data: ConceptData, part: int = 2) -> float:
    """Task accuracy of the Bayes-optimal classifier that sees every concept's true value, on a
    part of the split (default: test): argmax_t p(t | Markov blanket) with the network's own
    CPDs, p(t | mb) proportional to p(t | pa(t)) prod_{c child of t} p(c | pa(c)).

    A ceiling for any concept-based model on ``data``: its inputs carry the concepts only
    partly, so no model of them can beat it in expectation.
    """
    from fedpgm.data.bayesnet import read_network

    model = read_network(data.network)
    rows = data.part(part)
    column = {n: data.codes[rows, i] for i, n in enumerate(data.nodes)}
    t = data.task
    score = np.zeros((len(rows), data.cards[t]))
    for node in [t, *model.get_children(t)]:
        cpd = model.get_cpds(node)
        # our codes -> the CPD's own state order, which may differ; the task's axis varies below
        index = [np.array([list(cpd.state_names[v]).index(s) for s in data.states[v]])[column[v]]
                 for v in cpd.variables]
        axis = cpd.variables.index(t)
        for k, state in enumerate(data.states[t]):
            index[axis] = np.full(len(rows), list(cpd.state_names[t]).index(state))
            score[:, k] += np.log(cpd.values[tuple(index)] + 1e-300)
    return float((score.argmax(axis=1) == column[t]).mean())
