"""Dense (tensorized) circuits: a region graph with K units per region, evaluated layer by layer.

The EiNet construction (Peharz et al. 2020): a leaf region's K units are factorised input
distributions (``fedpgm.circuits.dense_inputs``); a partition (parent, left, right) gives K x K
products of its children's units, mixed into K units by weights W (K, K, K) that sum to one over
(left unit, right unit) (an einsum layer); a region with several partitions mixes their K units
per unit (a mixing layer); the root region's K units are mixed by K root weights.

Regions and partitions are stored in depth order, so each layer reads the values of earlier
layers and writes one contiguous block: a layer is a few tensor operations over all of its
partitions at once. Products of units are computed in log-einsum-exp form (shift by the max,
exp, one batched matmul of (K*K) by K per partition, log, unshift), which runs at matmul speed
and never underflows; an evaluation on the CPU takes each layer a cache-sized block at a time.

Values are log-probabilities: ``forward(x)`` -> (B,) log p(x) with NaN entries marginalised.
``select`` draws (or maximises) one unit per region top-down, exactly conditioned on the
observed entries, for sampling and inpainting. Parameters live in unconstrained form (logits,
means, raw variances) so Adam can train them; ``fedpgm.circuits.dense_train`` runs EM through
the same forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, ClassVar, Literal

import numpy as np
import torch
from torch import nn

from fedpgm.circuits.dense_inputs import INPUT_LAYERS, InputLayer
from fedpgm.circuits.region_graph import RegionGraph
from fedpgm.circuits.semiring import Semiring
from fedpgm.data.schema import Schema
from fedpgm.errors import FedpgmError

SELECTIONS = tuple(s.how for s in Semiring)  # how ``select`` fills missing entries (the CLI's --how)



@dataclass
class Layer:
    """One depth: partitions [p0, p1) and regions [r0, r1) (positions in depth order)."""

    p0: int
    p1: int
    r0: int
    r1: int
    left: torch.Tensor  # (P,) child region positions
    right: torch.Tensor  # (P,)
    children: torch.Tensor  # (2P,) left then right: one gather per layer
    mix: torch.Tensor  # (R, M) partition positions of each region, padded by repeating the first
    mix_mask: torch.Tensor  # (R, M) True where a partition is real


def log_einsum_exp(left: torch.Tensor, right: torch.Tensor, weights: torch.Tensor):
    """log sum_ij W[p, o, i, j] exp(left[p, b, i] + right[p, b, j]) -> (P, B, K_out) for left, right
    (P, B, K) log-values and W (P, K_out, K * K) probabilities: shift each side by its max, exp,
    outer product, one batched matmul, log, unshift. Also returns the outer products (P, B, K * K)
    and the matmul's result (P, B, K_out), which the backward pass needs."""
    lmax = left.amax(-1, keepdim=True)
    rmax = right.amax(-1, keepdim=True)
    lmax = torch.where(torch.isfinite(lmax), lmax, torch.zeros_like(lmax))  # (a child with all units at -inf)
    rmax = torch.where(torch.isfinite(rmax), rmax, torch.zeros_like(rmax))
    p, b, k = left.shape
    outer = (torch.exp(left - lmax)[:, :, :, None] * torch.exp(right - rmax)[:, :, None, :]).view(p, b, k * k)
    prod = torch.bmm(outer, weights.transpose(1, 2))
    return torch.log(prod).add_(lmax + rmax), outer, prod


BLOCK_CELLS = 2**21  # outer-product values alive at a time in an evaluation on the CPU (8 MB in float32)


def blocks(p: int, b: int, k: int, device: torch.device):
    """(partition slice, row slice) pairs covering a layer of ``p`` partitions x ``b`` rows at K = ``k``:
    on the CPU, blocks of at most BLOCK_CELLS outer-product values, so each block's outer products
    stay in the CPU's cache instead of a (P, B, K * K) tensor going out to memory and back (PD
    28 x 28, 500 rows, float32, against one whole-layer call: 1.8x at K = 10, 3.6x at K = 20, 3.1x
    at K = 40; blocks of 2^18-2^22 values measured, 2^21 best). A GPU takes the whole layer at
    once. Training keeps whole layers: its backward pass reuses the outer products, and
    recomputing them block by block, or keeping them per block, measured 0.65-0.9x as fast
    (online EM, K = 10, batches of 64)."""
    if device.type != "cpu" or p * b * k * k <= BLOCK_CELLS:
        yield slice(0, p), slice(0, b)
        return
    rows = min(b, max(1, BLOCK_CELLS // (k * k)))
    step = max(1, BLOCK_CELLS // (rows * k * k))
    for s in range(0, p, step):
        for r in range(0, b, rows):
            yield slice(s, s + step), slice(r, r + rows)


class LayeredPass(torch.autograd.Function):
    """All inner layers at once: (R0, B, K) leaf-region values, part weights (P, K, K * K) and mix
    weights (R, K, M) -> (R, B, K) values of every region. The backward pass is written out
    rather than left to autograd, which would re-allocate and zero a gradient of every region
    at every layer; here one buffer collects them, walking the layers back:

        mixing:  d candidate = responsibility * d region,  d w_mix = sum_b resp * d region / w_mix;
        einsum:  G = d out / prod;  d W = G^T outer;  d outer = (G W) * outer;
                 d left = sum_j d outer[i, j],  d right = sum_i d outer[i, j].
    """

    @staticmethod
    def forward(ctx, model: "DenseCircuit", leaves: torch.Tensor, part_w: torch.Tensor, mix_w: torch.Tensor):
        values, _, saved = model.evaluate(leaves, part_w, mix_w, keep=True)
        ctx.model, ctx.saved = model, saved
        ctx.save_for_backward(part_w, mix_w)
        return values

    @staticmethod
    def backward(ctx, d_values: torch.Tensor):
        model, saved = ctx.model, ctx.saved
        part_w, mix_w = ctx.saved_tensors
        d_values = d_values.clone()
        b = d_values.shape[1]
        d_parts = torch.zeros(len(model.part_order), b, model.units, dtype=d_values.dtype, device=d_values.device)
        d_part_w = torch.zeros_like(part_w)
        d_mix_w = torch.zeros_like(mix_w)
        k = model.units
        ones = torch.ones(k, 1, dtype=d_values.dtype, device=d_values.device)
        for lay, (outer, prod, resp) in zip(reversed(model.layers), reversed(saved)):
            g = d_values[lay.r0:lay.r1]  # (R, B, K)
            if resp is None:
                d_parts.index_add_(0, lay.mix[:, 0], g)
            else:
                d_cand = resp * g[:, None]  # (R, M, B, K)
                d_parts.index_add_(0, lay.mix.reshape(-1), d_cand.reshape(-1, b, model.units))
                w = mix_w[lay.r0:lay.r1, :, :resp.shape[1]]
                d_mix_w[lay.r0:lay.r1, :, :resp.shape[1]] = d_cand.sum(2).transpose(1, 2) / w.clamp_min(1e-300)
            n = lay.p1 - lay.p0
            grad = d_parts[lay.p0:lay.p1].div_(prod)  # (in place: nothing reads these rows again)
            d_outer = torch.bmm(grad, part_w[lay.p0:lay.p1]).mul_(outer).view(n, b, k, k)
            d_part_w[lay.p0:lay.p1] = torch.bmm(grad.transpose(1, 2), outer)
            d_left = (d_outer.view(-1, k) @ ones).view(n, b, k)  # (a sum over the last K: 2.4x faster as a matmul)
            d_values.index_add_(0, lay.children, torch.cat([d_left, d_outer.sum(-2)]))
        return None, d_values[:model.n_leaf_regions], d_part_w, d_mix_w


class DenseCircuit(nn.Module):
    """A smooth, decomposable circuit over ``graph.n_vars`` variables; see the module doc."""

    dense: ClassVar[Literal[True]] = True  # (a node ``Circuit``'s is False)
    format: ClassVar[str] = "fedpgm-dense-circuit/1"  # (``fedpgm.circuits.io.FORMATS``)
    pair_region: torch.Tensor  # (E,) a buffer: the region each input pair belongs to
    inputs: "InputLayer"

    def __init__(self, graph: RegionGraph, units: int, input_kind: str = "gaussian", levels: int | None = None,
                 input_options: dict | None = None, seed: int | None = 0) -> None:
        """``seed``: of the random initialisation; None leaves the sum weights unset, for a
        model whose parameters are loaded next (``from_spec``: no 6M random draws to overwrite)."""
        super().__init__()
        if units < 1:
            raise FedpgmError(f"the number of units K must be >= 1, got {units}")
        if input_kind not in INPUT_LAYERS:
            raise FedpgmError(f"unknown input distribution '{input_kind}'; use one of {sorted(INPUT_LAYERS)}")
        graph.check()
        self.graph, self.units, self.levels = graph, int(units), levels
        self.schema: Schema | None = None  # the columns it models, set by its learner
        self.columns: list[int] = list(range(graph.n_vars))  # schema index of each variable
        self.input_options = dict(input_options or {})
        gen = torch.Generator().manual_seed(seed if seed is not None else 0)
        region_depth, part_depth = graph.depths()
        reachable = self.reachable(graph)
        r_order = sorted((r for r in range(len(graph.regions)) if r in reachable), key=lambda r: (region_depth[r], r))
        p_order = sorted((j for j, (p, _, _) in enumerate(graph.partitions) if p in reachable),
                         key=lambda j: (part_depth[j], j))
        self.region_order, self.part_order = r_order, p_order
        r_pos = {r: i for i, r in enumerate(r_order)}
        self.n_leaf_regions = int(sum(region_depth[r] == 0 for r in r_order))
        pairs = [(r_pos[r], v) for r in r_order[:self.n_leaf_regions] for v in graph.regions[r]]
        self.register_buffer("pair_region", torch.tensor([p for p, _ in pairs], dtype=torch.long))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed if seed is not None else 0)
            layer: Callable[..., InputLayer] = INPUT_LAYERS[input_kind]  # (each kind takes its own options)
            self.inputs = layer(torch.tensor([v for _, v in pairs]), self.units, levels=levels, **self.input_options)
        self.layers: list[Layer] = []
        by_region: dict[int, list[int]] = {}
        for i, j in enumerate(p_order):
            by_region.setdefault(r_pos[graph.partitions[j][0]], []).append(i)
        depth_of_pos = [part_depth[j] for j in p_order]
        r_at = self.n_leaf_regions
        p_at = 0
        for depth in range(1, int(max(region_depth[r_order[-1]], 0)) + 1):
            p1 = p_at
            while p1 < len(p_order) and depth_of_pos[p1] == depth:
                p1 += 1
            r1 = r_at
            while r1 < len(r_order) and region_depth[r_order[r1]] == depth:
                r1 += 1
            parts = [graph.partitions[j] for j in p_order[p_at:p1]]
            m = max(len(by_region[r]) for r in range(r_at, r1))
            mix = torch.tensor([by_region[r] + [by_region[r][0]] * (m - len(by_region[r])) for r in range(r_at, r1)])
            mask = torch.tensor([[k < len(by_region[r]) for k in range(m)] for r in range(r_at, r1)])
            left, right = torch.tensor([r_pos[a] for _, a, _ in parts]), torch.tensor([r_pos[b] for _, _, b in parts])
            self.layers.append(Layer(p_at, p1, r_at, r1, left, right, torch.cat([left, right]), mix, mask))
            p_at, r_at = p1, r1
        if r_at != len(r_order) or p_at != len(p_order):
            raise FedpgmError("region graph: regions or partitions are out of depth order")
        k = self.units
        m_max = max([lay.mix.shape[1] for lay in self.layers] or [1])
        draw = torch.empty if seed is None else partial(torch.randn, generator=gen)
        self.part_logits = nn.Parameter(draw(len(p_order), k, k * k))
        self.mix_logits = nn.Parameter(draw(len(r_order), k, m_max))
        self.mask_padding()
        self.root_logits = nn.Parameter(torch.zeros(k))
        self.root_pos = r_pos[graph.root]
        if self.root_pos != len(r_order) - 1:
            raise FedpgmError("region graph: the root is not the deepest region")

    @torch.no_grad()
    def mask_padding(self) -> None:
        """Mixing weights of padded (absent) partitions to probability 0."""
        for lay in self.layers:
            m = lay.mix_mask.shape[1]
            self.mix_logits[lay.r0:lay.r1, :, :m].masked_fill_(~lay.mix_mask[:, None, :], -torch.inf)
            self.mix_logits[lay.r0:lay.r1, :, m:] = -torch.inf

    @staticmethod
    def reachable(graph: RegionGraph) -> set[int]:
        seen, stack = set(), [graph.root]
        children: dict[int, list[int]] = {}
        for p, a, b in graph.partitions:
            children.setdefault(p, []).extend([a, b])
        while stack:
            r = stack.pop()
            if r not in seen:
                seen.add(r)
                stack.extend(children.get(r, []))
        return seen

    # -- parameters -----------------------------------------------------------------------------
    def weights(self) -> dict[str, torch.Tensor]:
        """Normalised weights: ``part`` (P, K, K*K), ``mix`` (R, K, M), ``root`` (K,)."""
        return {"part": torch.softmax(self.part_logits, -1), "mix": torch.softmax(self.mix_logits, -1),
                "root": torch.softmax(self.root_logits, -1)}

    @property
    def n_params(self) -> int:
        mixing = int(sum(lay.mix_mask.sum().item() * self.units for lay in self.layers if lay.mix_mask.shape[1] > 1))
        return int(self.part_logits.numel() + mixing + self.root_logits.numel()
                   + sum(p.numel() for p in self.inputs.parameters()))

    def _apply(self, fn, recurse=True):
        """``.to(device)`` moves the layers' index tensors too."""
        super()._apply(fn, recurse)
        for lay in self.layers:
            lay.left, lay.right, lay.children = fn(lay.left), fn(lay.right), fn(lay.children)
            lay.mix, lay.mix_mask = fn(lay.mix), fn(lay.mix_mask)
        return self

    @property
    def device(self) -> torch.device:
        return self.part_logits.device

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self, leaves: torch.Tensor, part_w: torch.Tensor, mix_w: torch.Tensor, keep: bool = False):
        """(R, B, K) values of every region and (P, B, K) of every partition from the (R0, B, K)
        leaf regions' values (region and partition first, so each layer's gather copies whole
        blocks and its matmul needs no transposes); with ``keep``, what ``LayeredPass`` needs to
        differentiate each layer."""
        r0, b, k = leaves.shape
        values = torch.empty(len(self.region_order), b, k, dtype=leaves.dtype, device=leaves.device)
        parts = torch.empty(len(self.part_order), b, k, dtype=leaves.dtype, device=leaves.device)
        values[:r0] = leaves
        saved = []
        for lay in self.layers:  # a region's partitions may lie in this or earlier layers
            n = lay.p1 - lay.p0
            children = values.index_select(0, lay.children)  # (2P, B, K): left then right
            if keep:
                parts[lay.p0:lay.p1], outer, prod = log_einsum_exp(children[:n], children[n:], part_w[lay.p0:lay.p1])
            else:
                out, weights = parts[lay.p0:lay.p1], part_w[lay.p0:lay.p1]
                for s, r in blocks(n, b, k, values.device):
                    out[s, r] = log_einsum_exp(children[:n][s, r], children[n:][s, r], weights[s])[0]
            resp = None
            if lay.mix.shape[1] == 1:
                values[lay.r0:lay.r1] = parts.index_select(0, lay.mix[:, 0])
            else:
                r, m = lay.mix.shape
                candidates = parts.index_select(0, lay.mix.reshape(-1)).view(r, m, b, k)
                candidates = candidates + torch.log(mix_w[lay.r0:lay.r1, :, :m]).transpose(1, 2)[:, :, None, :]
                top = candidates.amax(1)  # (R, B, K): log-sum-exp over the partitions, shifted by the max
                top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
                shares = candidates.sub_(top[:, None]).exp_()  # (R, M, B, K), in place: one exp pass
                mass = shares.sum(1)
                values[lay.r0:lay.r1] = torch.log(mass).add_(top)
                if keep:  # each partition's share of its region's value: the softmax, from the same exps
                    resp = shares.div_(mass[:, None])
            if keep:
                saved.append((outer, prod, resp))
        return values, parts, saved

    def leaf_regions(self, x: torch.Tensor, discrete: bool = False, leaf: torch.Tensor | None = None) -> torch.Tensor:
        """(R0, B, K) log-values of the leaf regions' units (sums of their pairs' input values)."""
        leaf = self.inputs.log_prob(x, discrete) if leaf is None else leaf
        regions = torch.zeros(self.n_leaf_regions, x.shape[0], self.units, dtype=leaf.dtype, device=leaf.device)
        return regions.index_add(0, self.pair_region, leaf.transpose(0, 1))

    def forward(self, x: torch.Tensor, discrete: bool = False, weights: dict | None = None,
                leaf: torch.Tensor | None = None) -> torch.Tensor:
        """(B,) log p(x) (NaN marginalised); ``discrete``: masses of pixel values, not densities.
        ``weights``/``leaf``: precomputed ``weights()`` and input values (EM differentiates them)."""
        w = weights or self.weights()
        leaves = self.leaf_regions(x, discrete, leaf)
        if torch.is_grad_enabled():
            values = LayeredPass.apply(self, leaves, w["part"], w["mix"])
        else:
            values = self.evaluate(leaves, w["part"], w["mix"])[0]
        return torch.logsumexp(values[self.root_pos] + torch.log(w["root"]), -1)

    # -- top-down selection ---------------------------------------------------------------------
    @torch.no_grad()
    def select(self, x: torch.Tensor, how: Semiring | str = Semiring.SUM, seed: int = 0) -> torch.Tensor:
        """(B, V): ``x`` with its NaN entries filled by a sample of p(missing | observed)
        (``Semiring.SUM`` or ``"sample"``, exact) or by the most probable branch at every unit and
        each leaf's mode (``MAX``: an approximate MPE, as EiNets inpaint)."""
        how = Semiring.of(how)
        gen = torch.Generator(device=x.device).manual_seed(seed)
        w = self.weights()
        values, parts, _ = self.evaluate(self.leaf_regions(x, discrete=True), w["part"], w["mix"])
        values, parts = values.transpose(0, 1), parts.transpose(0, 1)  # (B, R, K), (B, P, K)
        b = x.shape[0]
        unit = torch.full((b, values.shape[1]), -1, dtype=torch.long, device=x.device)
        part_unit = torch.full((b, parts.shape[1]), -1, dtype=torch.long, device=x.device)

        unit[:, self.root_pos] = how.choose(values[:, self.root_pos] + torch.log(w["root"]), gen)
        for lay in reversed(self.layers):
            u = unit[:, lay.r0:lay.r1]  # (B, R)
            active = u >= 0
            uc = u.clamp_min(0)
            if lay.mix.shape[1] == 1:
                chosen_pos = lay.mix[:, 0].expand(b, -1)
            else:
                cand = parts[:, lay.mix]  # (B, R, M, K)
                cand = torch.gather(cand, 3, uc[:, :, None, None].expand(-1, -1, cand.shape[2], 1))[..., 0]
                log_mix = torch.log(w["mix"][lay.r0:lay.r1, :, :lay.mix.shape[1]])  # (R, K, M)
                log_mix = log_mix[torch.arange(lay.r1 - lay.r0)[None, :], uc]  # (B, R, M)
                m = how.choose(cand + log_mix, gen)
                chosen_pos = torch.gather(lay.mix.expand(b, -1, -1), 2, m[:, :, None])[..., 0]
            part_unit.scatter_reduce_(1, chosen_pos, torch.where(active, uc, -1), reduce="amax")
            o = part_unit[:, lay.p0:lay.p1]  # (B, P)
            on = o >= 0
            log_w = torch.log(w["part"][lay.p0:lay.p1])  # (P, K, K*K)
            log_w = log_w[torch.arange(lay.p1 - lay.p0)[None, :], o.clamp_min(0)]  # (B, P, K*K)
            pair = values[:, lay.left][:, :, :, None] + values[:, lay.right][:, :, None, :]
            ij = how.choose(log_w + pair.reshape(b, lay.p1 - lay.p0, -1), gen)
            k = self.units
            unit.scatter_reduce_(1, lay.left.expand(b, -1), torch.where(on, ij // k, -1), reduce="amax")
            unit.scatter_reduce_(1, lay.right.expand(b, -1), torch.where(on, ij % k, -1), reduce="amax")
        pair_unit = unit[:, self.pair_region]  # (B, E)
        drawn = self.inputs.draw(pair_unit.clamp_min(0), how, gen)
        drawn = torch.where(pair_unit >= 0, drawn, torch.zeros_like(drawn))
        filled = torch.zeros_like(x).index_add(1, self.inputs.var, drawn.to(x.dtype))
        return torch.where(torch.isnan(x), filled, x)

    # -- the circuit model protocol (``fedpgm.circuits.protocol``) --------------------------------
    # Rows hold the schema's columns (the variables alone without a schema); the circuit reads
    # ``columns`` of them.
    @property
    def width(self) -> int:
        return len(self.schema) if self.schema is not None else self.graph.n_vars

    def rows(self, X: np.ndarray) -> np.ndarray:
        """X (rows, width) as floats, after checking its width."""
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.width:
            raise FedpgmError(f"expected rows of {self.width} columns, got shape {X.shape}")
        return X

    @torch.no_grad()
    def log_likelihood(self, X: np.ndarray, batch_size: int = 512) -> np.ndarray:
        """(rows,) log p in nats (masses of the values where the inputs have levels: pixels)."""
        data = torch.as_tensor(self.rows(X)[:, self.columns], dtype=torch.float32, device=self.device)
        out = [self(data[i:i + batch_size], discrete=True) for i in range(0, len(data), batch_size)]
        return torch.cat(out).double().cpu().numpy() if out else np.zeros(0)

    def complete(self, X: np.ndarray, how: Semiring | str = Semiring.MAX, seed: int = 0) -> np.ndarray:
        """(rows, width) X with NaN filled by ``select`` (a draw under SUM, the most probable
        branch under MAX)."""
        out = self.rows(X).copy()
        x = torch.as_tensor(out[:, self.columns], dtype=torch.float32, device=self.device)
        out[:, self.columns] = self.select(x, how, seed).double().cpu().numpy()
        return out

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """(n, width) unconditional draws."""
        return self.complete(np.full((n, self.width), np.nan), Semiring.SUM, seed)

    # -- files ----------------------------------------------------------------------------------
    def spec(self) -> dict:
        """Everything but the numbers: rebuilds an identical module with ``from_spec``."""
        return {"graph": self.graph.to_dict(), "units": self.units, "input": self.inputs.kind,
                "levels": self.levels, "input_options": self.inputs.extra() | self.input_options,
                "schema": None if self.schema is None else self.schema.to_dict(), "columns": self.columns}

    @classmethod
    def from_spec(cls, spec: dict, where: str = "dense circuit", graph: RegionGraph | None = None) -> "DenseCircuit":
        """The module ``spec`` describes, its parameters unset (``load_arrays`` fills them). A file's
        spec is checked first (``fedpgm.circuits.io.dense_graph``: every field, and a size the
        arrays can back), which passes its ``graph``."""
        try:
            options = {k: v for k, v in spec.get("input_options", {}).items() if k != "levels"}
            graph = graph if graph is not None else RegionGraph.from_dict(spec["graph"])
            model = cls(graph, int(spec["units"]), str(spec["input"]), spec.get("levels"), options, seed=None)
            if spec.get("schema") is not None:
                model.schema = Schema.from_dict(spec["schema"])
                columns = [int(c) for c in spec["columns"]]
                if sorted(columns) != list(range(len(model.schema))) or len(columns) != model.graph.n_vars:
                    raise FedpgmError(f"{where}: field 'spec.columns' does not match its schema")
                model.columns = columns
            return model
        except RecursionError:  # (a chain of regions deeper than Python's stack)
            raise FedpgmError(f"{where}: field 'spec.graph' nests its regions too deeply") from None
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            if isinstance(e, FedpgmError):
                raise FedpgmError(f"{where}: field 'spec': {e}") from None
            raise FedpgmError(f"{where}: dense circuit description is malformed ({type(e).__name__}: {e})") from None

    def arrays(self) -> dict[str, np.ndarray]:
        """The parameters as arrays, all finite (padding is restored from the structure on load)."""
        out = {k: v.detach().cpu().numpy() for k, v in self.state_dict().items()
               if k not in ("pair_region", "inputs.var")}
        out["mix_logits"] = np.where(np.isfinite(out["mix_logits"]), out["mix_logits"], 0.0)
        return out

    def load_arrays(self, arrays: dict[str, np.ndarray], where: str) -> None:
        expected = {k: tuple(v.shape) for k, v in self.state_dict().items() if k not in ("pair_region", "inputs.var")}
        got = {k: tuple(np.shape(v)) for k, v in arrays.items()}
        if got != expected:
            wrong = sorted(set(got) ^ set(expected)) or [k for k in expected if got[k] != expected[k]]
            raise FedpgmError(f"{where}: parameter arrays do not fit the described circuit ({wrong[:3]})")
        bad = [k for k, v in arrays.items() if not np.isfinite(v).all()]
        if bad:
            raise FedpgmError(f"{where}: parameter array(s) {bad} hold NaN or infinite values")
        state = self.state_dict()  # (views of the parameters: one copy each, in place)
        with torch.no_grad():
            for k, v in arrays.items():
                state[k].copy_(torch.from_numpy(np.require(v, requirements="W")))  # (copied if read-only)
        self.mask_padding()
