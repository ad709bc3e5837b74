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

Used for log-likelihoods (``CompiledCircuit.forward(..., fused=True)``); passes that need every
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
    def __init__(self, cc) -> None:
        circuit = cc.circuit
        nodes, schema = circuit.nodes, circuit.schema
        linear = []
        for n in nodes:
            linear.append(n.dist in LINEAR if isinstance(n, Leaf)
                          else isinstance(n, Product) and all(linear[c] for c in n.children))
        needed = {circuit.root} if linear[circuit.root] else set()
        for n in nodes:
            if not isinstance(n, Leaf) and not (isinstance(n, Product) and all(linear[c] for c in n.children)):
                needed.update(c for c in n.children if linear[c])
        self.frontier = sorted(needed)
        self.fused = {i for i, flag in enumerate(linear) if flag}
        self.positions = cc.tensor([cc.position[i] for i in self.frontier], torch.long)
        # feature blocks: continuous vars -> z^2, z, observed, missing (one column per var);
        # discrete vars -> one-hot (one column per state), missing (one column per var)
        vars_ = sorted({n.var for i, n in enumerate(nodes) if linear[i] and isinstance(n, Leaf)})
        self.cont = [v for v in vars_ if not schema.features[v].discrete]
        self.disc = [v for v in vars_ if schema.features[v].discrete]
        self.slot = {}
        for k, v in enumerate(self.cont):
            for name in ("sq", "lin", "obs", "miss"):
                self.slot[(v, name)] = (name, k)
        onehot_var, onehot_state = [], []
        for v in self.disc:
            for state in range(schema.features[v].cardinality):
                self.slot[(v, state)] = ("onehot", len(onehot_var))
                onehot_var.append(v)
                onehot_state.append(state)
        for k, v in enumerate(self.disc):
            self.slot[(v, "miss")] = ("dmiss", k)
        self.width = {"sq": len(self.cont), "lin": len(self.cont), "obs": len(self.cont),
                      "miss": len(self.cont), "onehot": len(onehot_var), "dmiss": len(self.disc)}
        self.center, self.scale = self.standardisation(nodes, linear)
        self.onehot_var = cc.tensor(onehot_var, torch.long)
        self.onehot_state = cc.tensor(onehot_state)
        self.cont_t, self.disc_t = cc.tensor(self.cont, torch.long), cc.tensor(self.disc, torch.long)
        self.center_t = cc.tensor([self.center.get(v, 0.0) for v in self.cont])
        self.scale_t = cc.tensor([self.scale.get(v, 1.0) for v in self.cont])
        self.inv_scale_t = 1.0 / self.scale_t
        self.shift_t = -self.center_t * self.inv_scale_t
        self.coef = {mode: self.coefficients(cc, nodes, mode) for mode in ("sum", "max")}
        self.all_continuous = self.cont == list(range(len(schema)))
        ones = torch.ones(len(self.cont), 1, dtype=cc.dtype, device=cc.device)
        self.obs_total = {m: c["obs"] @ ones for m, c in self.coef.items() if "obs" in c}

    def standardisation(self, nodes, linear) -> tuple[dict, dict]:
        """Per continuous variable, a centre and scale from its leaves (keeps z moderate)."""
        means: dict[int, list] = {}
        for i, n in enumerate(nodes):
            if linear[i] and isinstance(n, Leaf) and n.dist == "gaussian":
                means.setdefault(n.var, []).append((float(n.params["mean"]), float(n.params["std"])))
        center = {v: float(np.mean([m for m, _ in ms])) for v, ms in means.items()}
        scale = {v: float(max(np.std([m for m, _ in ms]), max(s for _, s in ms))) for v, ms in means.items()}
        return center, scale

    def leaf_coefficients(self, leaf: Leaf, mode: str) -> dict[int, float]:
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

    def coefficients(self, cc, nodes, mode: str) -> dict[str, torch.Tensor]:
        """Per feature block, the (n_frontier, block width) coefficients, dense or sparse CSR."""
        entries: dict[str, tuple[list, list, list]] = {b: ([], [], []) for b in self.width}
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
                    rows, cols, vals = entries[block]
                    rows.append(k)
                    cols.append(col)
                    vals.append(value)
        out = {}
        for block, (rows, cols, vals) in entries.items():
            shape = (len(self.frontier), self.width[block])
            if not vals:
                continue
            coo = torch.sparse_coo_tensor(torch.tensor([rows, cols], dtype=torch.long),
                                          torch.tensor(vals, dtype=cc.dtype), shape,
                                          check_invariants=True).coalesce()
            if len(vals) > DENSE_LIMIT * shape[0] * shape[1]:
                out[block] = coo.to_dense().to(cc.device)
            else:
                with warnings.catch_warnings():  # torch calls its CSR support "beta"
                    warnings.simplefilter("ignore", UserWarning)
                    out[block] = coo.to_sparse_csr().to(cc.device)
        return out

    def values(self, x: torch.Tensor, cc, mode: str) -> torch.Tensor:
        """(n_frontier, rows) log-values of the frontier nodes, x (rows, variables)."""
        coef = self.coef[mode]
        out = torch.zeros(len(self.frontier), x.shape[0], dtype=cc.dtype, device=cc.device)

        def add(block: str, feats: torch.Tensor) -> None:  # feats (rows, width)
            if block in coef:
                m = coef[block]
                out.add_(m @ (feats.T if m.layout == torch.strided else feats.T.contiguous()))

        if self.cont:
            xc = x if self.all_continuous else x[:, self.cont_t]  # (rows, Vc)
            z = torch.addcmul(self.shift_t, xc, self.inv_scale_t)  # (x - center) / scale
            if not torch.isfinite(z.sum()):  # one reduction instead of a mask when nothing is missing
                missing = torch.isnan(z)
                z = torch.where(missing, 0.0, z)
                add("obs", (~missing).to(cc.dtype))
                add("miss", missing.to(cc.dtype))
            elif "obs" in coef:
                out.add_(self.obs_total[mode])  # every variable observed: a constant per node
            add("sq", z * z)
            add("lin", z)
        if self.disc:
            add("onehot", (x[:, self.onehot_var] == self.onehot_state).to(cc.dtype))
            missing = torch.isnan(x[:, self.disc_t])
            if missing.any():
                add("dmiss", missing.to(cc.dtype))
        return out
