"""Fused evaluation of a circuit's linear part as one matrix product (an optimisation pass).

Gaussian, Bernoulli and categorical leaves are *linear* in per-variable features: with
``z = (x - center) / scale``, a Gaussian leaf's log-density is ``a z^2 + b z + c`` when ``x`` is
observed; a discrete leaf's is its log-probability table dotted with the one-hot of ``x``; and a
missing ``x`` contributes 0 (marginal) or the leaf's log-mode (max-product), through an
"observed"/"missing" indicator. A product of linear nodes is linear too: its coefficients are
the sum of its children's (decomposability: no variable twice). So every node in the linear part
of the circuit is ``features @ coefficients``, and only its *frontier* (linear nodes used by a
sum, by a non-linear product, or that are the root) needs computing: one dense or sparse matmul
replaces the leaf layer and all product layers below the first sums.

Used for log-likelihoods (``CompiledCircuit.fused_root``); passes that need every
node's value (flows, MPE, sampling) use the plain layers. Tests check both agree.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from fedpgm.circuits.leaves import LOG_2PI
from fedpgm.circuits.structure import Leaf, Product

LINEAR = ("gaussian", "bernoulli", "categorical")  # leaf types with linear log-densities
LOG_ZERO = -1e30  # finite stand-in for log 0 (0 x -inf would be NaN in a matmul)
DENSE_LIMIT = 0.05  # use a dense coefficient matrix above this fill ratio


class LinearFrontier:
    """The linear part of a compiled circuit (its Gaussian, Bernoulli and categorical leaves and the
    products over them) as ``features @ coefficients`` for its frontier nodes: one matrix product
    instead of the leaf layer and the product layers below the first sums (module docstring)."""
    def __init__(self, cc) -> None:
        circuit = cc.circuit
        nodes, schema = circuit.nodes, circuit.schema
        linear: list[bool] = []
        for n in nodes:
            linear.append(n.dist in LINEAR if isinstance(n, Leaf)
                          else isinstance(n, Product) and all(linear[c] for c in n.children))
        needed = {circuit.root} if linear[circuit.root] else set()
        for n in nodes:
            if not isinstance(n, Leaf) and not (isinstance(n, Product) and all(linear[c] for c in n.children)):
                needed.update(c for c in n.children if linear[c])
        self.frontier = sorted(needed)
        self.fused = {i for i, flag in enumerate(linear) if flag}
        # feature blocks: continuous vars -> z^2, z, observed, missing (one column per var);
        # discrete vars -> one-hot (one column per state), missing (one column per var)
        vars_ = sorted({n.var for i, n in enumerate(nodes) if linear[i] and isinstance(n, Leaf)})
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
        self.coef = {}  # mode -> (all columns, core columns, (n_frontier, 1) constant when complete)
        n_front, obs = len(self.frontier), self.columns["obs"]
        for mode in ("sum", "max"):
            rows, cols, vals = self.coefficients(nodes, mode)
            core, is_obs = cols < self.core_width, (cols >= obs.start) & (cols < obs.stop)
            constant = np.bincount(rows[is_obs], vals[is_obs], minlength=n_front)[:, None]
            self.coef[mode] = (matrix(cc, rows, cols, vals, (n_front, self.columns["dmiss"].stop)),
                               matrix(cc, rows[core], cols[core], vals[core], (n_front, self.core_width)),
                               cc.tensor(constant))

    def standardisation(self, nodes, linear) -> tuple[dict, dict]:
        """Per continuous variable, a centre and scale from its leaves (keeps z moderate)."""
        means: dict[int, list] = {}
        for i, n in enumerate(nodes):
            if linear[i] and isinstance(n, Leaf) and n.dist == "gaussian":
                means.setdefault(n.var, []).append((float(n.params["mean"]), float(n.params["std"])))
        center = {v: float(np.mean([m for m, _ in ms])) for v, ms in means.items()}
        scale = {v: float(max(np.std([m for m, _ in ms]), max(s for _, s in ms))) for v, ms in means.items()}
        return center, scale

    def leaf_coefficients(self, leaf: Leaf, mode: str) -> dict[tuple[str, int], float]:
        if leaf.dist == "gaussian":
            mu, sd = float(leaf.params["mean"]), float(leaf.params["std"])
            c, s = self.center[leaf.var], self.scale[leaf.var]
            r, d = s / sd, (c - mu) / sd  # (x - mu) / sd = r z + d
            log_norm = -math.log(sd) - 0.5 * LOG_2PI
            out = {self.slot[(leaf.var, "sq")]: -0.5 * r * r, self.slot[(leaf.var, "lin")]: -r * d,
                   self.slot[(leaf.var, "obs")]: -0.5 * d * d + log_norm}
            out[self.slot[(leaf.var, "miss")]] = log_norm if mode == "max" else 0.0
            return out
        probs = (np.array([1 - float(leaf.params["p"]), float(leaf.params["p"])])
                 if leaf.dist == "bernoulli" else np.asarray(leaf.params["probs"], dtype=float))
        with np.errstate(divide="ignore"):
            logp = np.maximum(np.log(probs), LOG_ZERO)
        out = {self.slot[(leaf.var, s)]: float(lp) for s, lp in enumerate(logp)}
        out[self.slot[(leaf.var, "miss")]] = float(logp.max()) if mode == "max" else 0.0
        return out

    def coefficients(self, nodes, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Non-zero coefficients as (frontier row, feature column, value) arrays."""
        rows, cols, vals = [], [], []
        leaf_coef: dict[int, dict] = {}
        for k, f in enumerate(self.frontier):
            stack = [f]
            while stack:
                i = stack.pop()
                n = nodes[i]
                if not isinstance(n, Leaf):
                    stack.extend(n.children)
                    continue
                if i not in leaf_coef:
                    leaf_coef[i] = self.leaf_coefficients(n, mode)
                for (block, col), value in leaf_coef[i].items():
                    rows.append(k)
                    cols.append(self.columns[block].start + col)
                    vals.append(value)
        return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals)

    def values(self, x: torch.Tensor, cc, mode: str, complete: bool | None, out: torch.Tensor) -> torch.Tensor:
        """``out`` (n_frontier, rows): log-values of the frontier nodes, x (rows, variables).

        ``complete``: the caller knows x has no NaN (None: check). Complete rows need only the
        CORE feature columns; the observed-indicator terms are then one constant per node.
        """
        full, core, constant = self.coef[mode]
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
        if complete:
            return times(core, feats, out).add_(constant)
        return times(full, feats, out)


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
