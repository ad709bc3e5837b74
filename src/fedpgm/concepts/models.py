"""Concept-based models whose concept set and graph can grow: CBM, CEM, CGM, C2BM, opaque.

One ``ConceptModel`` holds a shared input encoder and one module per node (concept or task),
keyed by the node's name, so federated averaging can go module by module and a new concept or
a re-wired parent touches only the modules concerned. A node module reads its sources through
one block per source, keyed by the source's name: adding a source adds a zero-initialised
block (the module computes exactly what it did before), removing one deletes its block, and no
other weight moves.

- ``cbm``: each concept from the input code; the task from all concepts' probabilities.
- ``cem``: each concept has per-state embeddings generated from the input code and scored by a
  scorer shared by all concepts (CEM's ``shared_prob_gen``); the mixed embedding (states
  weighted by probability) of every concept feeds the task.
- ``cgm``: each node from its graph parents' mixed embeddings (a learned embedding per state)
  plus, for concepts, the input code.
- ``c2bm``: each node has an exogenous embedding from the input code; a hypernetwork per parent
  maps it to the weights that read that parent's probabilities (plus a bias from it).
- ``opaque``: an MLP from the input code to the task; no concepts.

Interventions replace a concept's probabilities by its true one-hot for chosen rows; everything
downstream (embeddings, children, task) uses the intervened value.
"""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file
from torch import nn

from fedpgm.errors import FedpgmError
from fedpgm.files import atomic_folder
from fedpgm.federation.contract import Choice, Fields, Int, Invalid, ListOf, MapOf, Text
from fedpgm.model_files import (SEAL, BadModelFile, check_file, check_finite, check_keys, check_seal, file_record,
                                need, read_json, seal)

KINDS = ("cbm", "cem", "cgm", "c2bm", "opaque")
ENCODER, SCORER = "encoder", "scorer"

# What rebuilds an architecture (``ConceptModel.spec``), bounded: a spec comes from a model file or
# from a coordinator's train request, and the model is built from it only inside these sizes (the
# encoder alone is input_dim x hidden floats: at most 20.5 M).
SPEC = Fields({"kind": Choice(*KINDS), "task": Text(), "hidden": Int(1, 1024), "emb": Int(1, 256),
               "input_dim": Int(1, 20_000), "cards": MapOf(Int(2, 1024), max_len=512),
               "nodes": ListOf(Text(), 512, unique=True),
               "edges": ListOf(ListOf(Text(), 2), 8192, unique=True)},
              required=("kind", "task", "hidden", "emb", "input_dim", "cards", "nodes", "edges"))


def key(name: str) -> str:
    """A module-dict key for a node name (no dots)."""
    return name.replace(".", "\u2024")


class StateEmbedding(nn.Module):
    """(rows, card) state probabilities -> (rows, emb): the probability-weighted state embeddings."""

    def __init__(self, card: int, emb: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(card, emb) * 0.1)

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        return p @ self.table


class NodeModule(nn.Module):
    """logits (rows, card) = out(LeakyReLU(inp(h) + sum_s block_s(source_s) + bias)).

    Every parameter sits in an ``nn.Linear`` or a module fed a tensor, so Opacus can compute
    per-sample gradients for DP-SGD."""

    def __init__(self, card: int, hidden: int, emb: int, uses_input: bool, states: bool) -> None:
        super().__init__()
        self.card, self.hidden = card, hidden
        self.inp = nn.Linear(hidden, hidden) if uses_input else None
        self.blocks = nn.ModuleDict()
        self.bias = nn.Linear(1, hidden, bias=False)  # a learned offset, read from a column of ones
        nn.init.zeros_(self.bias.weight)
        self.out = nn.Linear(hidden, card)
        self.states = StateEmbedding(card, emb) if states else None

    def add_source(self, name: str, dim: int) -> None:
        block = nn.Linear(dim, self.hidden, bias=False)
        nn.init.zeros_(block.weight)
        self.blocks[key(name)] = block

    def forward(self, h: torch.Tensor, sources: dict[str, torch.Tensor]) -> torch.Tensor:
        z = self.bias(h.new_ones(h.shape[0], 1))
        if self.inp is not None:
            z = z + self.inp(h)
        for k, block in self.blocks.items():
            z = z + block(sources[k])
        return self.out(F.leaky_relu(z, 0.01))


class HyperModule(nn.Module):
    """C2BM node: exogenous u = exo(h); logits = base(u) + sum_p probs_p @ W_p(u)."""

    def __init__(self, card: int, hidden: int, emb: int) -> None:
        super().__init__()
        self.card, self.emb = card, emb
        self.exo = nn.Sequential(nn.Linear(hidden, emb), nn.LeakyReLU(0.01))
        self.base = nn.Linear(emb, card)
        self.blocks = nn.ModuleDict()
        self.parent_cards: dict[str, int] = {}

    def add_source(self, name: str, dim: int) -> None:
        block = nn.Linear(self.emb, dim * self.card)
        nn.init.zeros_(block.weight)
        nn.init.zeros_(block.bias)
        self.blocks[key(name)] = block
        self.parent_cards[key(name)] = dim

    def forward(self, h: torch.Tensor, sources: dict[str, torch.Tensor]) -> torch.Tensor:
        u = self.exo(h)
        logits = self.base(u)
        for k, block in self.blocks.items():
            W = block(u).view(-1, self.parent_cards[k], self.card)
            logits = logits + torch.einsum("bp,bpc->bc", sources[k], W)
        return logits


class ConceptModel(nn.Module):
    """A concept model over ``cards`` (node -> number of states) following ``graph``."""

    def __init__(self, kind: str, input_dim: int, cards: dict[str, int], graph: nx.DiGraph, task: str,
                 hidden: int = 64, emb: int = 16, seed: int = 0) -> None:
        super().__init__()
        if kind not in KINDS:
            raise FedpgmError(f"unknown model '{kind}'; use one of {', '.join(KINDS)}")
        torch.manual_seed(seed)
        self.kind, self.task, self.hidden, self.emb = kind, task, hidden, emb
        self.input_dim = input_dim
        self.cards: dict[str, int] = {}
        self.graph = nx.DiGraph()
        self.encoder = nn.Sequential(nn.Linear(input_dim, hidden), nn.LeakyReLU(0.01))
        self.scorer = nn.Linear(emb, 1) if kind == "cem" else None
        self.nodes = nn.ModuleDict()
        self.adapt(graph, cards)

    # -- architecture --------------------------------------------------------------------------
    @property
    def concepts(self) -> list[str]:
        return [n for n in self.order() if n != self.task]

    def order(self) -> list[str]:
        """Nodes in topological order, the task last (it is a sink; CBM/CEM read every concept)."""
        return [n for n in nx.lexicographical_topological_sort(self.graph) if n != self.task] + [self.task]

    def sources_of(self, node: str) -> list[str]:
        """The nodes whose values feed ``node``'s module."""
        if self.kind == "opaque":
            return []
        if node == self.task and self.kind in ("cbm", "cem"):
            return [n for n in self.graph.nodes() if n != self.task]
        if node != self.task and self.kind in ("cbm", "cem"):
            return []
        return sorted(self.graph.predecessors(node))

    def source_dim(self, source: str) -> int:
        return self.emb if self.kind in ("cem", "cgm") else self.cards[source]

    def new_module(self, node: str) -> nn.Module:
        card = self.cards[node]
        if self.kind == "c2bm":
            return HyperModule(card, self.hidden, self.emb)
        if self.kind == "cem" and node != self.task:
            return nn.Linear(self.hidden, card * self.emb)  # per-state embeddings from h
        uses_input = node != self.task or self.kind == "opaque"
        return NodeModule(card, self.hidden, self.emb, uses_input, states=self.kind == "cgm")

    def adapt(self, graph: nx.DiGraph, cards: dict[str, int]) -> dict:
        """Grow to ``graph``: a module per new node (E1), sources added (zero-initialised) or
        removed where parents changed (E2); every other weight is kept. Returns what changed."""
        if self.task not in graph and self.kind != "opaque":
            graph = graph.copy()
            graph.add_node(self.task)
        if self.kind == "opaque":
            graph = nx.DiGraph()
            graph.add_node(self.task)
        if not nx.is_directed_acyclic_graph(graph):
            raise FedpgmError("a concept model needs an acyclic graph")
        unknown = [n for n in graph.nodes() if n not in cards]
        if unknown:
            raise FedpgmError(f"no number of states for node(s) {unknown}")
        self.graph = graph.copy()
        self.cards.update({n: int(cards[n]) for n in graph.nodes()})
        added, rewired = [], []
        for node in self.order():
            if key(node) not in self.nodes:
                self.nodes[key(node)] = self.new_module(node)
                added.append(node)
            module = self.nodes[key(node)]
            if not isinstance(module, (NodeModule, HyperModule)):
                continue  # (CEM's concept embeddings read h only)
            want = {key(s): s for s in self.sources_of(node)}
            have = set(module.blocks.keys())
            for k in have - set(want):
                del module.blocks[k]
                if isinstance(module, HyperModule):
                    module.parent_cards.pop(k)
            for k in sorted(set(want) - have):
                module.add_source(want[k], self.source_dim(want[k]))
            if (have != set(want)) and node not in added:
                rewired.append(node)
        return {"added": added, "rewired": rewired}

    def idle_parameters(self, supervised: set[str] | None = None) -> set[str]:
        """State-embedding tables no supervised output depends on: those of nodes that feed no
        module whose node, or a descendant of it, is in ``supervised`` (default: every node)."""
        live = set(self.order()) if supervised is None else set(supervised)
        out = set()
        for n in self.order():
            if getattr(self.nodes[key(n)], "states", None) is None:
                continue
            consumers = [c for c in self.order() if n in self.sources_of(c)]
            if not any(c in live or nx.descendants(self.graph, c) & live for c in consumers):
                out.add(f"nodes.{key(n)}.states.table")
        return out

    def module_names(self) -> list[str]:
        """Units of module-wise averaging: the encoder, the CEM scorer, one per node."""
        return [ENCODER] + ([SCORER] if self.scorer is not None else []) + [f"nodes.{key(n)}" for n in self.order()]

    def spec(self) -> dict:
        """What rebuilds this architecture: JSON."""
        return {"kind": self.kind, "task": self.task, "hidden": self.hidden, "emb": self.emb,
                "input_dim": self.input_dim, "cards": self.cards,
                "edges": sorted([u, v] for u, v in self.graph.edges()), "nodes": sorted(self.graph.nodes())}

    @staticmethod
    def from_spec(spec: dict, seed: int = 0) -> "ConceptModel":
        """The architecture ``spec`` describes (``SPEC``'s bounds already checked), freshly
        initialised from ``seed``; ``FedpgmError`` for edges or nodes that do not fit together."""
        nodes = set(spec["nodes"])
        if any(len(e) != 2 or not set(e) <= nodes for e in spec["edges"]) or not nodes <= set(spec["cards"]):
            raise FedpgmError("a concept model spec whose edges join nodes it lists, each with its number of states")
        g = nx.DiGraph()
        g.add_nodes_from(spec["nodes"])
        g.add_edges_from(spec["edges"])
        return ConceptModel(spec["kind"], spec["input_dim"], spec["cards"], g, spec["task"],
                            spec["hidden"], spec["emb"], seed)

    # -- computation -------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, truth: torch.Tensor | None = None,
                intervene: torch.Tensor | None = None, columns: list[str] | None = None) -> dict:
        """node -> logits (rows, card). ``truth`` (rows, len(columns)) codes (-1 unknown) and
        ``intervene`` (rows, len(columns)) bool: where set and known, the true value replaces
        the predicted probabilities for everything downstream."""
        h = self.encoder(x)
        col = {n: i for i, n in enumerate(columns or [])}
        logits: dict[str, torch.Tensor] = {}
        values: dict[str, torch.Tensor] = {}
        # CEM's concept embeddings read only h, so the shared scorer scores them all in one call:
        # Opacus hooks every call of a module for per-sample gradients, and one call per concept,
        # some not reaching the loss (concepts a client does not label), left them unset
        if self.kind == "cem":
            concepts = [n for n in self.order() if n != self.task]
            embedding = {n: self.nodes[key(n)](h).view(-1, self.cards[n], self.emb) for n in concepts}
            assert self.scorer is not None  # (CEM has one)
            scores = self.scorer(torch.cat([embedding[n] for n in concepts], dim=1)).squeeze(-1)
            scored = dict(zip(concepts, scores.split([self.cards[n] for n in concepts], dim=1)))
        for node in self.order():
            module = self.nodes[key(node)]
            if self.kind == "cem" and node != self.task:
                e, out = embedding[node], scored[node]  # (rows, card, emb), (rows, card)
            else:
                srcs = {key(s): values[s] for s in self.sources_of(node)}
                out = module(h, srcs)
                e = None
            logits[node] = out
            p = torch.softmax(out, dim=1)
            if truth is not None and intervene is not None and node in col:
                t, m = truth[:, col[node]], intervene[:, col[node]] & (truth[:, col[node]] >= 0)
                if m.any():
                    p = torch.where(m[:, None], F.one_hot(t.clamp(min=0), self.cards[node]).float(), p)
            if self.kind == "cem" and node != self.task:
                values[node] = (p[:, :, None] * e).sum(1)
            elif self.kind == "cgm":
                assert isinstance(module, NodeModule) and module.states is not None  # (CGM's nodes have states)
                values[node] = module.states(p)
            else:
                values[node] = p
        return logits

    def count(self, names: list[str] | None = None) -> int:
        """Number of parameters (of the modules in ``names``)."""
        sd = self.state_dict()
        return int(sum(v.numel() for k, v in sd.items()
                       if names is None or any(k == n or k.startswith(n + ".") for n in names)))


def module_of(param: str, names: list[str]) -> str:
    """The module-wise averaging unit a state-dict key belongs to."""
    for n in names:
        if param == n or param.startswith(n + "."):
            return n
    raise FedpgmError(f"parameter {param} belongs to no module")


def arrays(model: ConceptModel, modules: list[str] | None = None) -> dict[str, np.ndarray]:
    """State-dict entries (of ``modules``) as float32 arrays."""
    names = model.module_names()
    return {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()
            if modules is None or module_of(k, names) in modules}


def load_arrays(model: ConceptModel, values: dict[str, np.ndarray]) -> None:
    sd = model.state_dict()
    for k, v in values.items():
        if k not in sd or tuple(sd[k].shape) != tuple(v.shape):
            raise FedpgmError(f"parameter {k} does not fit the model (shape {tuple(v.shape)})")
        sd[k] = torch.tensor(np.array(v))
    model.load_state_dict(sd)


FORMAT = "fedpgm-concept-model/2"  # 2: the document sealed, its spec bounded


def save_model(model: ConceptModel, folder, meta: dict | None = None):
    """``model.json`` (architecture + ``meta``) and ``weights.safetensors``, written atomically."""
    folder = Path(folder)
    with atomic_folder(folder) as tmp:
        save_file(arrays(model), str(tmp / "weights.safetensors"))
        (tmp / "model.json").write_text(json.dumps(seal({"format": FORMAT, "spec": model.spec(), "meta": meta or {},
                                                         "weights": file_record(tmp / "weights.safetensors")})))
    return folder


def load_model(folder) -> tuple[ConceptModel, dict]:
    """(model, meta) from a folder written by ``save_model``; never unpickles."""
    folder = Path(folder)
    if not (folder / "model.json").is_file() or not (folder / "weights.safetensors").is_file():
        raise FedpgmError(f"{folder} is not a concept-model folder; write one with `fedpgm concepts fit --out`")
    where = f"{folder}/model.json"
    doc = read_json(folder / "model.json")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FedpgmError(f"{where} is not a {FORMAT} file; fit the model again with this fedpgm")
    check_seal(doc, where)
    check_keys(doc, where, "document", ("format", "spec", "meta", "weights", SEAL))
    need(doc["meta"], dict, where, "meta")
    try:
        spec = SPEC.check(doc["spec"], None)
    except Invalid as e:
        raise BadModelFile(f"{where}: field 'spec' {e}") from None
    check_file(folder / "weights.safetensors", doc.get("weights"), str(folder))
    try:
        weights = load_file(str(folder / "weights.safetensors"))
    except (SafetensorError, OSError) as e:
        raise FedpgmError(f"{folder}: cannot read the model ({e}); write it again") from None
    check_finite(weights, str(folder))
    try:
        model = ConceptModel.from_spec(spec)
        load_arrays(model, weights)
    except FedpgmError as e:
        raise BadModelFile(f"{where}: {e}") from None
    return model, doc.get("meta", {})
