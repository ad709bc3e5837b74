"""Fused evaluation of a circuit's linear part as one matrix product (an optimisation pass).

Gaussian, Bernoulli and categorical leaves are *linear* in per-variable features: with
``z = (x - center) / scale``, a Gaussian leaf's log-density is ``a z^2 + b z + c`` when ``x`` is
observed; a discrete leaf's is its log-probability table dotted with the one-hot of ``x``; and a
missing ``x`` contributes 0 (marginal) or the leaf's log-mode (max-product), through an
"observed"/"missing" indicator. A product of linear nodes is linear too: its coefficients are
the sum of its children's (decomposability: no variable twice).

Sums over linear nodes flatten further: a node's value is a *mixture*, log sum_t exp(log w_t +
features @ coefficients_t), when it is linear (one term), a sum of mixtures (the union of their
terms, each term's log-weight raised by the edge's), or a product of linear nodes and at most one
mixture (the linear children's coefficients added to each of its terms; with two mixtures the
terms would multiply). Only the *frontier* (mixture nodes used by a node outside the fused part,
or the root) is computed: one matmul gives every term, a log-sum-exp per node reduces them, and
the leaf layer, the product layers and the sum layers of the fused part are never evaluated. On
50,000 x 20 blobs LearnSPN's tree (5 sum layers, 14 linear frontier nodes) becomes one mixture
of 8 terms at the root.

Used for log-likelihoods (``CompiledCircuit.fused_root``); passes that need every
node's value (flows, MPE, sampling) use the plain layers. Tests check both agree.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from fedpgm.circuits.leaves import LINEAR_LEAVES, leaf_type
from fedpgm.circuits.semiring import Semiring
from fedpgm.circuits.nodes import Leaf, Product, Sum

DENSE_LIMIT = 0.05  # use a dense coefficient matrix above this fill ratio
MAX_TERMS = 64  # a sum stays a layer (is not flattened) above this many terms
GEMM_ROWS = 4  # the matmul's rows are padded to a multiple of this: float64 (7, 60) @ (60, 4096)
# took 3.0 ms per 100,000 rows against 1.8 ms for (8, 60), (31, 60) 6.5 against (32, 60) 4.6


class LinearFrontier:
    """The fused part of a compiled circuit (its Gaussian, Bernoulli and categorical leaves and the
    products and sums flattened over them) as ``features @ coefficients`` per mixture term and a
    log-sum-exp per frontier node (module docstring).

    Its ``n_rows`` rows of the value table: the matmul's terms (the one-term frontier nodes' own,
    then each mixture's, padded to the next power of two with zero coefficients and log-weight
    -inf, so pads cost less than half and one reduction serves each arity), then the mixtures'
    values. ``positions[k]`` is ``frontier[k]``'s row; ``buckets`` (first term row, first value
    row, mixtures, arity) say what reduces into what."""
    def __init__(self, cc) -> None:
        circuit = cc.circuit
        nodes, schema = circuit.nodes, circuit.schema
        terms = mixtures(nodes)
        needed = {circuit.root} if terms[circuit.root] is not None else set()
        for i, n in enumerate(nodes):
            if not isinstance(n, Leaf) and terms[i] is None:
                needed.update(c for c in n.children if terms[c] is not None)
        single = sorted(i for i in needed if len(terms[i]) == 1)
        arity = {i: 1 << (len(terms[i]) - 1).bit_length() for i in needed if len(terms[i]) > 1}
        multi = sorted(arity, key=lambda i: (arity[i], i))
        pad = [(-math.inf, ())]
        rows = [terms[i][0] for i in single] + [t for i in multi for t in terms[i] + pad * (arity[i] - len(terms[i]))]
        rows += pad * (-len(rows) % GEMM_ROWS)
        self.n_terms, self.n_rows = len(rows), len(rows) + len(multi)
        self.frontier = single + multi
        self.positions = list(range(len(single))) + list(range(len(rows), self.n_rows))
        self.buckets: list[tuple[int, int, int, int]] = []
        at = len(single)
        for k, i in enumerate(multi, len(rows)):
            if self.buckets and self.buckets[-1][3] == arity[i]:
                first, start, count, a = self.buckets[-1]
                self.buckets[-1] = (first, start, count + 1, a)
            else:
                self.buckets.append((at, k, 1, arity[i]))
            at += arity[i]
        self.fused = {i for i, t in enumerate(terms) if t is not None}
        linear = [t is not None and isinstance(n, Leaf) for n, t in zip(nodes, terms)]
        # feature blocks: continuous vars -> z^2, z, observed, missing (one column per var);
        # discrete vars -> one-hot (one column per state), missing (one column per var)
        vars_ = sorted({n.var for i, n in enumerate(nodes) if linear[i]})
        self.cont = [v for v in vars_ if not schema.features[v].discrete]
        self.disc = [v for v in vars_ if schema.features[v].discrete]
        self.slot: dict[tuple[int, str | int], tuple[str, int]] = {}  # (var, term or state) -> feature column
        for k, v in enumerate(self.cont):
            for name in ("sq", "lin", "obs", "miss"):
                self.slot[(v, name)] = (name, k)
        onehot_var: list[int] = []
        onehot_state: list[int] = []
        for v in self.disc:
            for state in range(schema.features[v].cardinality):
                self.slot[(v, state)] = ("onehot", len(onehot_var))
                onehot_var.append(v)
                onehot_state.append(state)
        for k, v in enumerate(self.disc):
            self.slot[(v, "miss")] = ("dmiss", k)
        width = {"sq": len(self.cont), "lin": len(self.cont), "onehot": len(onehot_var),
                 "obs": len(self.cont), "miss": len(self.cont), "dmiss": len(self.disc)}
        self.columns, at = {}, 0  # block -> column slice of the feature matrix, CORE blocks first
        for block, w in width.items():
            self.columns[block] = slice(at, at + w)
            at += w
        self.core_width = self.columns["onehot"].stop
        self.center, self.scale = self.standardisation(nodes, linear)
        self.onehot_var = cc.tensor(onehot_var, torch.long)
        self.onehot_state = cc.tensor(onehot_state)
        self.cont_t, self.disc_t = cc.tensor(self.cont, torch.long), cc.tensor(self.disc, torch.long)
        self.center_t = cc.tensor([self.center.get(v, 0.0) for v in self.cont])
        self.scale_t = cc.tensor([self.scale.get(v, 1.0) for v in self.cont])
        self.inv_scale_t = 1.0 / self.scale_t
        self.shift_t = -self.center_t * self.inv_scale_t
        self.all_continuous = self.cont == list(range(len(schema)))
        # mode -> (all columns, core columns, (terms, 1) constants: when complete, otherwise)
        self.coef: dict[Semiring, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        n_rows, obs = len(rows), self.columns["obs"]
        log_w = np.array([w for w, _ in rows])[:, None]
        for mode in Semiring:
            r, cols, vals = self.coefficients(nodes, [leaves for _, leaves in rows], mode)
            core, is_obs = cols < self.core_width, (cols >= obs.start) & (cols < obs.stop)
            constant = np.bincount(r[is_obs], vals[is_obs], minlength=n_rows)[:, None]
            self.coef[mode] = (matrix(cc, r, cols, vals, (n_rows, self.columns["dmiss"].stop)),
                               matrix(cc, r[core], cols[core], vals[core], (n_rows, self.core_width)),
                               cc.tensor(constant + log_w), cc.tensor(log_w))

    def standardisation(self, nodes, linear) -> tuple[dict, dict]:
        """Per continuous variable, a centre and scale from its leaves (keeps z moderate)."""
        means: dict[int, list] = {}
        for i, n in enumerate(nodes):
            if linear[i] and isinstance(n, Leaf) and (where := leaf_type(n.dist).location(n.params)) is not None:
                means.setdefault(n.var, []).append(where)
        center = {v: float(np.mean([m for m, _ in ms])) for v, ms in means.items()}
        scale = {v: float(max(np.std([m for m, _ in ms]), max(s for _, s in ms))) for v, ms in means.items()}
        return center, scale

    def leaf_coefficients(self, leaf: Leaf, mode: Semiring) -> dict[tuple[str, int], float]:
        """The leaf's coefficients by feature column: its type's ``linear_form``, and what a
        missing value gives (``Semiring.unobserved``: 0, or the log-value at its mode)."""
        terms, log_mode = leaf_type(leaf.dist).linear_form(leaf.params, self.center.get(leaf.var, 0.0),
                                                           self.scale.get(leaf.var, 1.0))
        out = {self.slot[(leaf.var, k)]: v for k, v in terms.items()}
        out[self.slot[(leaf.var, "miss")]] = log_mode if mode is Semiring.MAX else 0.0
        return out

    def coefficients(self, nodes, terms: list[tuple[int, ...]],
                     mode: Semiring) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Non-zero coefficients as (term row, feature column, value) arrays; ``terms`` holds each
        term's leaves."""
        rows, cols, vals = [], [], []
        leaf_coef: dict[int, dict] = {}
        for k, leaves in enumerate(terms):
            for i in leaves:
                if i not in leaf_coef:
                    leaf_coef[i] = self.leaf_coefficients(nodes[i], mode)
                for (block, col), value in leaf_coef[i].items():
                    rows.append(k)
                    cols.append(self.columns[block].start + col)
                    vals.append(value)
        return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals)

    def values(self, x: torch.Tensor, cc, mode: Semiring, complete: bool | None, out: torch.Tensor) -> torch.Tensor:
        """Fill ``out`` (n_rows, rows): the terms' and the mixtures' log-values (class docstring)
        for x (rows, variables); the terms of mixtures are overwritten.

        ``complete``: the caller knows x has no NaN (None: check). Complete rows need only the
        CORE feature columns; the observed-indicator terms are then one constant per term.
        """
        full, core, constant, log_w = self.coef[mode]
        if complete is None:
            complete = bool(torch.isfinite(x.sum()))  # one reduction; infinite input is refused earlier
        cols = self.columns
        feats = torch.empty(x.shape[0], self.core_width if complete else cols["dmiss"].stop,
                            dtype=cc.dtype, device=cc.device)
        if self.cont:
            z = feats[:, cols["lin"]]
            torch.addcmul(self.shift_t, x if self.all_continuous else x[:, self.cont_t], self.inv_scale_t,
                          out=z)  # (x - center) / scale
            if not complete:
                missing = torch.isnan(z)
                z.masked_fill_(missing, 0.0)
                feats[:, cols["obs"]] = ~missing
                feats[:, cols["miss"]] = missing
            torch.mul(z, z, out=feats[:, cols["sq"]])
        if self.disc:
            feats[:, cols["onehot"]] = x[:, self.onehot_var] == self.onehot_state
            if not complete:
                feats[:, cols["dmiss"]] = torch.isnan(x[:, self.disc_t])
        coef, bias = (core, constant) if complete else (full, log_w)
        times(coef, feats, out[:self.n_terms]).add_(bias)
        for first, start, count, arity in self.buckets:
            scores = out[first:first + count * arity].view(count, arity, -1)  # (mixtures, arity, rows)
            mode.reduce(scores, out[start:start + count], far_apart=True)
        return out


def times(coef: torch.Tensor, feats: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` = coef (n, W) @ feats.T for feats (rows, W), dense or sparse coefficients."""
    if coef.layout == torch.strided:
        return torch.mm(coef, feats.T, out=out)
    return out.copy_(coef @ feats.T.contiguous())


def matrix(cc, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape) -> torch.Tensor:
    """A (rows, cols) coefficient matrix on the circuit's device: dense, or sparse CSR when at
    most DENSE_LIMIT of its entries are non-zero (large circuits)."""
    coo = torch.sparse_coo_tensor(torch.from_numpy(np.stack([rows, cols])), torch.from_numpy(vals),
                                  shape, check_invariants=True).coalesce().to(cc.dtype)
    if len(vals) > DENSE_LIMIT * shape[0] * shape[1]:
        return coo.to_dense().to(cc.device)
    with warnings.catch_warnings():  # torch calls its CSR support "beta"
        warnings.simplefilter("ignore", UserWarning)
        return coo.to_sparse_csr().to(cc.device)


Terms = list[tuple[float, tuple[int, ...]]]  # (log-weight, leaf ids) per term


def mixtures(nodes) -> list[Terms | None]:
    """Per node (topological order), its value as a mixture of linear terms, or None where it is
    not fused: a non-linear leaf below it, a product of two or more mixtures (their terms would
    multiply), a sum of more than MAX_TERMS terms, a sum over a child that other nodes use too,
    or a product over a shared mixture (a DAG's shared nodes, e.g. a RAT-SPN's products or a
    Chow-Liu tree's mixtures, are computed once, not copied into each parent's terms; a product
    may add a shared linear child's coefficients). Zero-weight edges give no term. A fused node
    absorbed by its only parent keeps ``[]`` (fused, never on the frontier), so only the sweep's
    open nodes hold terms."""
    uses = np.bincount([c for n in nodes if not isinstance(n, Leaf) for c in n.children], minlength=len(nodes))
    out: list[Terms | None] = []
    for i, n in enumerate(nodes):
        if isinstance(n, Leaf):
            out.append([(0.0, (i,))] if n.dist in LINEAR_LEAVES else None)
            continue
        kids = [out[c] for c in n.children]
        if any(k is None or (uses[c] > 1 and (isinstance(n, Sum) or len(k) > 1)) for c, k in zip(n.children, kids)):
            out.append(None)
        elif isinstance(n, Product):
            multi = [k for k in kids if len(k) > 1]  # (no child is None here)
            single = [k[0] for k in kids if len(k) == 1]
            base_w, base = sum(w for w, _ in single), tuple(leaf for _, leaves in single for leaf in leaves)
            out.append(None if len(multi) > 1 else
                       [(w + base_w, leaves + base) for w, leaves in (multi[0] if multi else [(0.0, ())])])
        else:
            terms = [(w + math.log(weight), leaves) for k, weight in zip(kids, n.weights) if weight > 0
                     for w, leaves in k]
            out.append(terms if len(terms) <= MAX_TERMS else None)
        if out[i] is not None:  # a child used only here lives on in these terms: free its own
            for c in n.children:
                if uses[c] == 1:
                    out[c] = []
    return out
