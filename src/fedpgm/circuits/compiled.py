"""Compiled circuits: the symbolic structure as tensor layers, evaluated in log space.

Compilation orders the nodes as [leaves grouped by type | layer 1 | layer 2 | ...], where a
node's layer is one more than its deepest child's and each layer holds its products and then
its sums. One evaluation writes a (rows, nodes) table of log-values with a few vectorised ops
per layer (gather the children's columns, then a segment sum for products or a segment
log-sum-exp for sums), batched over rows: no Python loop over nodes or rows.

Passes:

- ``forward(x, mode)`` -> (nodes, rows): ``Semiring.SUM`` gives log-likelihoods (NaN inputs
  marginalised exactly); ``MAX`` gives max-product values (NaN inputs maximised).
- ``fused_root(x, mode)`` -> (rows,): the root's values alone, the linear part by one matmul into
  a compact table of the few nodes left (``fusion``); what likelihood queries use.
- ``flows(values)``: top-down posterior probability that each node is used for each row, and
  each sum edge's use summed over the rows (the expected counts of EM).
- ``select(values, how)``: one child per sum per row, top-down (``Semiring.MAX`` for MPE;
  ``SUM`` draws proportionally to weight x child value: exact conditional sampling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedpgm.circuits.fused import LinearFrontier
from fedpgm.circuits.leaves import LINEAR_LEAVES, leaf_type
from fedpgm.circuits.nodes import Leaf, Sum
from fedpgm.circuits.semiring import Semiring

if TYPE_CHECKING:
    from fedpgm.circuits.structure import Circuit


@dataclass
class LeafGroup:
    """Leaves of one distribution type, compiled as one block: positions ``start:end`` of the
    compiled order, the variable of each leaf and its parameters as tensors."""
    dist: str
    start: int
    end: int
    nodes: list[int]  # symbolic ids
    vars: torch.Tensor  # (L,) variable index of each leaf
    params: dict[str, torch.Tensor]
    log_mode: torch.Tensor  # (L,) log-density at each leaf's mode


@dataclass
class Layer:
    """One layer of a compiled circuit: products or sums at positions ``start:end``, as an edge
    list (child position, parent index within the layer, log-weight for sums)."""
    kind: str  # "product" or "sum"
    start: int
    end: int
    nodes: list[int]  # symbolic ids
    child: torch.Tensor  # (E,) compiled position of each edge's child
    parent: torch.Tensor  # (E,) parent's index within the layer (0..end-start-1)
    log_w: torch.Tensor | None = None  # (E,) sums only

    @property
    def log_weights(self) -> torch.Tensor:
        """(E,) log-weights of a sum layer's edges (product layers have none)."""
        if self.log_w is None:
            raise ValueError(f"a {self.kind} layer has no edge weights")
        return self.log_w

    def __post_init__(self) -> None:
        """Sums also get a padded view, (n, K) children and (n, K, 1) log-weights (-inf pads), so
        one gather and a log-sum-exp over K evaluate the whole layer."""
        if self.kind != "sum":
            return
        n = self.end - self.start
        order = torch.argsort(self.parent, stable=True)
        parent, child, log_w = self.parent[order], self.child[order], self.log_weights[order]
        arity = torch.bincount(parent, minlength=n)
        first = torch.cumsum(arity, 0) - arity
        slot = torch.arange(len(parent), device=parent.device) - first[parent]
        # pads repeat the node's first child (a value that is surely written) with probability 0
        self.slots = child[first][:, None].repeat(1, int(arity.max()))
        self.slot_w = torch.full(self.slots.shape, -math.inf, dtype=log_w.dtype, device=log_w.device)
        self.slots[parent, slot] = child
        self.slot_w[parent, slot] = log_w
        self.slot_w = self.slot_w[:, :, None]
        self.edge_slot = torch.empty_like(parent)  # (E,) each edge's place in the flattened (n, K) slots
        self.edge_slot[order] = parent * self.slots.shape[1] + slot


def segment_max(scores: torch.Tensor, parent: torch.Tensor, n: int) -> torch.Tensor:
    """(E, rows) -> (n, rows): max over each parent's edges."""
    out = torch.full((n, scores.shape[1]), -math.inf, dtype=scores.dtype, device=scores.device)
    index = parent[:, None].expand_as(scores)
    return out.scatter_reduce_(0, index, scores, "amax", include_self=True)


@dataclass
class Fusion:
    """What a fused pass evaluates (``CompiledCircuit.fusion``): the fused part as one matmul and a
    log-sum-exp per mixture, then the other leaf groups and the layers' remaining nodes, in a
    compact table of ``n_values`` rows (terms and mixtures | other leaves | remaining layers)
    whose row ``root`` is the root."""
    linear: LinearFrontier
    groups: list[LeafGroup]
    layers: list[Layer]
    n_values: int
    root: int


def segment_argmax(scores: torch.Tensor, parent: torch.Tensor, n: int) -> torch.Tensor:
    """(E, rows) -> (n, rows): index of the first best edge of each parent."""
    best = segment_max(scores, parent, n)
    edges = torch.arange(scores.shape[0], device=scores.device)[:, None].expand_as(scores)
    cand = torch.where(scores >= best[parent], edges, scores.shape[0])
    out = torch.full((n, scores.shape[1]), scores.shape[0], dtype=torch.long, device=scores.device)
    out = out.scatter_reduce_(0, parent[:, None].expand_as(scores), cand, "amin", include_self=True)
    return out.clamp(max=scores.shape[0] - 1)  # rows where every edge is -inf: any edge


class CompiledCircuit:
    """A ``Circuit`` ready to evaluate; ``dtype`` float64 (exact) or float32 (faster)."""

    def __init__(self, circuit: Circuit, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64) -> None:
        circuit.validate()
        self.circuit, self.device, self.dtype = circuit, torch.device(device), dtype
        nodes = circuit.nodes
        self.n_vars = len(circuit.schema)
        pos: dict[int, int] = {}  # symbolic id -> compiled position
        self.groups: list[LeafGroup] = []
        leaves = {i: n for i, n in enumerate(nodes) if isinstance(n, Leaf)}
        inner = {i: n for i, n in enumerate(nodes) if not isinstance(n, Leaf)}
        for dist in sorted({n.dist for n in leaves.values()}):
            ids = [i for i, n in leaves.items() if n.dist == dist]
            start = len(pos)
            pos.update({i: start + k for k, i in enumerate(ids)})
            self.groups.append(LeafGroup(dist, start, len(pos), ids, self.tensor(
                [leaves[i].var for i in ids], torch.long), *self.leaf_parameters(dist, ids)))
        self.n_leaves = len(pos)
        height: dict[int, int] = {}
        for i, n in enumerate(nodes):
            height[i] = 1 + max(height[c] for c in n.children) if not isinstance(n, Leaf) else 0
        self.layers: list[Layer] = []
        by_layer: dict[tuple[int, str], list[int]] = {}  # (height, kind) -> node ids, in id order
        for i, n in inner.items():
            by_layer.setdefault((height[i], "sum" if isinstance(n, Sum) else "product"), []).append(i)
        for h in range(1, max(height.values()) + 1):
            for kind in ("product", "sum"):
                ids = by_layer.get((h, kind), [])
                if not ids:
                    continue
                self.layers.append(self.layer(kind, ids, pos, len(pos)))
        self.position = pos
        self.n_nodes = len(pos)
        self.root = pos[circuit.root]
        self._fusion: Fusion | None = None

    def leaf_parameters(self, dist: str, ids: list[int]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The leaves ``ids`` (symbolic, all of type ``dist``): their stacked parameters and (L,)
        log-densities at their modes."""
        leaf_kind = leaf_type(dist)
        params = {k: v.to(self.device, self.dtype if v.is_floating_point() else v.dtype)
                  for k, v in leaf_kind.stack([self.circuit.nodes[i].params for i in ids]).items()}  # type: ignore[union-attr]
        mode = leaf_kind.mode(params)
        return params, leaf_kind.log_prob(mode.unsqueeze(0), params).squeeze(0)

    def sum_log_weights(self, ids: list[int]) -> torch.Tensor:
        """(E,) log-weights of the sums ``ids`` (symbolic), their edges in order."""
        weights = [n.weights for i in ids if isinstance(n := self.circuit.nodes[i], Sum)]
        with np.errstate(divide="ignore"):
            return self.tensor(np.log(np.concatenate(weights)))

    def reload_parameters(self) -> None:
        """Read the circuit's sum weights and leaf parameters again (the structure unchanged, as
        after an EM step): much cheaper than compiling anew."""
        for g in self.groups:
            g.params, g.log_mode = self.leaf_parameters(g.dist, g.nodes)
        for layer in self.layers:
            if layer.kind == "sum":
                layer.log_w = self.sum_log_weights(layer.nodes)
                layer.slot_w.view(-1)[layer.edge_slot] = layer.log_w  # (pads keep -inf)
        self._fusion = None

    def layer(self, kind: str, ids: list[int], pos: dict[int, int], start: int) -> Layer:
        """The layer of nodes ``ids`` (symbolic), placed in ``pos`` (symbolic id -> row) at rows
        ``start`` on; ``pos`` already places their children."""
        nodes = self.circuit.nodes
        pos.update({i: start + k for k, i in enumerate(ids)})
        children = [[] if isinstance(n := nodes[i], Leaf) else n.children for i in ids]
        child = [pos[c] for kids in children for c in kids]
        parent = [k for k, kids in enumerate(children) for _ in kids]
        log_w = self.sum_log_weights(ids) if kind == "sum" else None
        return Layer(kind, start, start + len(ids), ids, self.tensor(child, torch.long),
                     self.tensor(parent, torch.long), log_w)

    def fusion(self) -> Fusion:
        """The fused pass's plan (built once): only the fused frontier's terms and mixtures, the
        non-linear leaves and the nodes above them hold values, in a table of their own (a few
        dozen rows where the full one has hundreds: it stays in cache and the matmul writes into
        it directly)."""
        if self._fusion is None:
            linear = LinearFrontier(self)
            pos = dict(zip(linear.frontier, linear.positions))
            groups, layers, rows = [], [], linear.n_rows
            for g in self.groups:
                if g.dist not in LINEAR_LEAVES:
                    pos.update({i: rows + k for k, i in enumerate(g.nodes)})
                    groups.append(replace(g, start=rows, end=rows + len(g.nodes)))
                    rows += len(g.nodes)
            for layer in self.layers:
                if ids := [i for i in layer.nodes if i not in linear.fused]:
                    layers.append(self.layer(layer.kind, ids, pos, rows))
                    rows += len(ids)
            self._fusion = Fusion(linear, groups, layers, rows, pos[self.circuit.root])
        return self._fusion

    def tensor(self, values, dtype=None) -> torch.Tensor:
        """A fresh tensor (never a view of the caller's array) of ``dtype`` on the device."""
        array = np.asarray(values)
        if array.dtype == np.float64 and (dtype or self.dtype) != torch.float64:
            return torch.from_numpy(np.ascontiguousarray(array)).to(dtype or self.dtype, copy=True)
        return torch.as_tensor(np.array(array), dtype=dtype or self.dtype, device=self.device)

    # -- upward ---------------------------------------------------------------------------
    # Values are stored node-major, (nodes, rows): gathering a layer's children then copies
    # whole contiguous rows of memory.
    def leaf_values(self, x: torch.Tensor, mode: Semiring = Semiring.SUM, groups=None) -> list[torch.Tensor]:
        """Per leaf group, (L, rows) log-values of x (rows, variables)."""
        out = []
        for g in self.groups if groups is None else groups:
            xv = x[:, g.vars]  # (rows, L)
            lp = leaf_type(g.dist).log_prob(xv, g.params)
            fill = mode.unobserved(g.log_mode)
            out.append(torch.where(torch.isnan(xv), fill.expand_as(lp), lp).T)
        return out

    @torch.no_grad()
    def forward(self, x: torch.Tensor, mode: Semiring | str = Semiring.SUM) -> torch.Tensor:
        """x (rows, variables) with NaN for unobserved -> log-values of every node (nodes, rows)."""
        mode = Semiring(mode)
        values = torch.empty(self.n_nodes, x.shape[0], dtype=self.dtype, device=self.device)
        for g, lp in zip(self.groups, self.leaf_values(x, mode)):
            values[g.start:g.end] = lp
        return self.evaluate(values, self.layers, mode)

    @torch.no_grad()
    def fused_root(self, x: torch.Tensor, mode: Semiring | str = Semiring.SUM,
                   complete: bool | None = None) -> torch.Tensor:
        """(rows,) the root's log-value, the linear part by one matmul (``fedpgm.circuits.fused``;
        enough for likelihoods). ``complete``: the caller knows whether x has a NaN (None: check)."""
        mode = Semiring(mode)
        plan = self.fusion()
        values = torch.empty(plan.n_values, x.shape[0], dtype=self.dtype, device=self.device)
        plan.linear.values(x, self, mode, complete, out=values[:plan.linear.n_rows])
        for g, lp in zip(plan.groups, self.leaf_values(x, mode, plan.groups)):
            values[g.start:g.end] = lp
        return self.evaluate(values, plan.layers, mode)[plan.root]

    def evaluate(self, values: torch.Tensor, layers: list[Layer], mode: Semiring) -> torch.Tensor:
        """Fill ``values`` (table rows, rows) layer by layer upward; its leaf rows are set."""
        for layer in layers:
            out = values[layer.start:layer.end]
            if layer.kind == "product":
                out.zero_().index_add_(0, layer.parent, values[layer.child])
                continue
            n = layer.end - layer.start
            scores = values[layer.slots.reshape(-1)].view(n, -1, values.shape[1]).add_(layer.slot_w)  # (n, K, rows)
            mode.reduce(scores, out)
        return values

    def log_likelihood(self, x: torch.Tensor, complete: bool | None = None) -> torch.Tensor:
        """(rows,) log p(observed part of each row); ``complete`` as for ``fused_root``."""
        return self.fused_root(x, complete=complete)

    # -- downward -------------------------------------------------------------------------
    @torch.no_grad()
    def flows(self, values: torch.Tensor, edge_tops: list | None = None
              ) -> tuple[torch.Tensor, list[np.ndarray | None]]:
        """Posterior use of each node (nodes, rows), and per sum layer each edge's use summed over
        the rows ((E,) float64; None for product layers). A sum's flow to its children, in log
        space over the padded slots: log flow(parent) - value(parent) + log w + value(child).
        ``edge_tops``: a list of one entry per layer, filled per sum layer with each edge's
        largest use by one row ((E,) float64)."""
        flow = torch.zeros_like(values)
        flow[self.root] = 1.0
        edge_counts: list[np.ndarray | None] = [None] * len(self.layers)
        for k in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[k]
            if layer.kind == "product":
                flow.index_add_(0, layer.child, flow[layer.start:layer.end][layer.parent])
                continue
            n, slots = layer.end - layer.start, layer.slots.reshape(-1)
            parent_v = values[layer.start:layer.end]
            parent_v = torch.where(torch.isfinite(parent_v), parent_v, math.inf)  # impossible rows: 0
            share = torch.log(flow[layer.start:layer.end]).sub_(parent_v)  # (n, rows)
            fp = values[slots].view(n, -1, values.shape[1]).add_(layer.slot_w).add_(share[:, None])  # (n, K, rows)
            fp.exp_()
            flow.index_add_(0, slots, fp.view(len(slots), -1))
            edge_counts[k] = fp.sum(2, dtype=torch.float64).reshape(-1)[layer.edge_slot].cpu().numpy()
            if edge_tops is not None:
                edge_tops[k] = fp.amax(2).double().reshape(-1)[layer.edge_slot].cpu().numpy()
        return flow, edge_counts

    @torch.no_grad()
    def select(self, values: torch.Tensor, how: Semiring, gen: torch.Generator | None = None) -> torch.Tensor:
        """Top-down choice of one child per sum (a draw under ``SUM``, the best under ``MAX``; values
        from ``forward`` in the same semiring): returns the active leaves (n_leaves, rows)."""
        rows = values.shape[1]
        active = torch.zeros(self.n_nodes, rows, dtype=self.dtype, device=self.device)
        active[self.root] = 1.0
        for layer in reversed(self.layers):
            n = layer.end - layer.start
            on = active[layer.start:layer.end].clone()  # (n, rows)
            if layer.kind == "product":
                active.index_add_(0, layer.child, on[layer.parent])
                continue
            scores = how.perturb(values[layer.child] + layer.log_weights[:, None], gen)
            chosen = layer.child[segment_argmax(scores, layer.parent, n)]  # (n, rows)
            active.scatter_reduce_(0, chosen, on, "amax", include_self=True)
        return active[: self.n_leaves] > 0

    def fill(self, x: torch.Tensor, active: torch.Tensor, how: Semiring,
             gen: torch.Generator | None = None) -> torch.Tensor:
        """Missing entries of ``x`` (rows, variables) from the active leaves' modes (``MAX``) or draws."""
        rows = x.shape[0]
        proposal = torch.zeros(rows, self.n_vars, dtype=self.dtype, device=self.device)
        for g in self.groups:
            kind = leaf_type(g.dist)
            vals = (kind.mode(g.params).expand(rows, -1) if how is Semiring.MAX
                    else kind.sample(g.params, rows, gen).to(self.dtype))
            on = active[g.start:g.end].T
            proposal.index_add_(1, g.vars, torch.where(on, vals, torch.zeros_like(vals)))
        return torch.where(torch.isnan(x), proposal, x)
