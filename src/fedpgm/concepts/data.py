"""Concept data as in the F-CM paper (App. B/D): a Bayesian network sampled, a task node, every
other node a (categorical) concept, and inputs that hide the concepts.

Inputs x are the latent code of a small autoencoder (2 encoder + 2 decoder layers, MSE) of the
one-hot concept vector (the task excluded), mixed 50/50 with Gaussian noise and standardised;
so x carries the concepts' information only partly and through a learned code. Splits 70/10/20
by seed.

A user's concept-annotated table (``table_concept_data``): input columns, discrete concept
columns and a task column; a manifest (``read_manifest``) says which concepts each client
observes. Inputs are the input columns, numeric ones standardised (a missing cell at the mean)
and categorical ones one-hot; rows missing a concept or the task are left out. With no true
DAG, the reference DAG (interventions by depth, coverage, DiffPairs: evaluation only, never
sent to the federation) is learned on all training rows, as the paper's GES proxy for its
real-world table (``fedpgm.concepts.graphs.learn_graph``).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import torch
from torch import nn

from fedpgm.concepts.graphs import learn_graph
from fedpgm.data import load_dataset
from fedpgm.data.dataset import Dataset
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

    @property
    def dataset(self) -> str:
        """The dataset name: ``bn:NETWORK``, or the table's own (``csv:FILE``)."""
        return self.network if ":" in self.network else f"bn:{self.network}"


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


CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MANIFEST_SHAPE = '{"client0": ["concept1", "concept2"], "client1": ["concept2", "concept3"]}'


def read_manifest(path: Path) -> dict[str, list[str]]:
    """Which concept columns each client observes, from a JSON file shaped as ``MANIFEST_SHAPE``;
    clients in file order (the first half starts, the rest join later)."""
    where = f"--client-concepts {path}"
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FedpgmError(f"{where} does not exist; write a JSON file such as {MANIFEST_SHAPE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FedpgmError(f"{where} is not JSON ({e}); write it as {MANIFEST_SHAPE}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, list) and all(isinstance(c, str) for c in v)
                                            for v in doc.values()):
        raise FedpgmError(f"{where} must map each client to a list of concept columns, e.g. {MANIFEST_SHAPE}")
    for name, columns in doc.items():
        if not CLIENT_NAME.fullmatch(name):
            raise FedpgmError(f"{where}: client name {name!r} must be letters, digits, '_', '.' or '-'; rename it")
        if not columns:
            raise FedpgmError(f"{where}: client '{name}' observes no concept; give it at least one concept "
                              "column or leave it out")
        if len(set(columns)) != len(columns):
            raise FedpgmError(f"{where}: client '{name}' lists a concept twice: {columns}")
    if len(doc) < 2:
        raise FedpgmError(f"{where} lists {len(doc)} client(s); F-CMs need at least 2 (an initial and a late one)")
    return doc


def table_concept_data(ds: Dataset, task: str, manifest: dict[str, list[str]], inputs: list[str] | None = None,
                       seed: int = 0) -> ConceptData:
    """A user's table as concept data (module doc): concepts are the manifest's columns, inputs
    the given columns (default: every other column), split 70/10/20 by seed."""
    names = ds.schema.names
    concepts = list(dict.fromkeys(c for columns in manifest.values() for c in columns))
    unknown = [c for c in [task, *concepts, *(inputs or [])] if c not in names]
    if unknown:
        raise FedpgmError(f"column(s) {unknown} are not in {ds.name}; its columns are {names}")
    if task in concepts:
        raise FedpgmError(f"the task '{task}' is listed as a client's concept; every client observes the task, "
                          "so list concepts only in --client-concepts")
    inputs = inputs if inputs is not None else [n for n in names if n != task and n not in concepts]
    hidden = [n for n in inputs if n == task or n in concepts]
    if hidden:
        raise FedpgmError(f"--inputs names the concept or task column(s) {hidden}; an input cannot be a label")
    if not inputs:
        raise FedpgmError("no input column is left: name the inputs with --inputs, apart from concepts and task")
    nodes = concepts + [task]
    for n in nodes:
        if not ds.schema[n].discrete:
            raise FedpgmError(f"concept/task column '{n}' is numeric; concepts and the task are categories: "
                              "threshold it into classes (e.g. 0/1) or mark it categorical in a --schema")
    frame = pd.concat([ds.train, ds.test]).sort_index()
    labelled = frame[nodes].notna().all(axis=1)
    if not labelled.all():
        print(f"note: {int((~labelled).sum())} row(s) miss a concept or the task and are left out", file=sys.stderr)
        frame = frame[labelled]
    if len(frame) < 20:
        raise FedpgmError(f"{ds.name} has {len(frame)} fully labelled rows; F-CMs need at least 20")
    codes = frame[nodes].to_numpy(dtype=int)
    blocks = []
    for n in inputs:
        v = frame[n].to_numpy(dtype=float)
        if ds.schema[n].kind in ("binary", "categorical"):
            blocks.append(np.eye(ds.schema[n].cardinality, dtype=np.float32)[np.nan_to_num(v, nan=0).astype(int)]
                          * ~np.isnan(v)[:, None])
        else:
            mean, sd = np.nanmean(v), np.nanstd(v)
            blocks.append(np.nan_to_num((v - mean) / max(sd, 1e-6), nan=0.0)[:, None])
    x = np.concatenate(blocks, axis=1).astype(np.float32)
    split = np.random.default_rng(seed).choice(3, size=len(codes), p=[0.7, 0.1, 0.2])
    dag = learn_graph(codes[split == 0], nodes, task)
    return ConceptData(ds.name, task, nodes, {n: ds.schema[n].cardinality for n in nodes},
                       {n: ds.schema[n].states for n in nodes}, codes, x, split, dag)
