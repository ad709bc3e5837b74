"""Input layers of dense circuits: K univariate distributions per (leaf region, variable) pair.

A leaf region's unit k is the product of its variables' k-th distributions, so a layer holds
parameters of shape (E, K, ...) for the E (region, variable) pairs and ``log_prob`` returns
(B, E, K); a missing value (NaN) contributes log 1 = 0 (exact marginalisation).

Each layer also gives its EM M-step from posteriors ``q`` (B, E, K) (the gradient of the
batch log-likelihood with respect to ``log_prob``'s output, as EiNets compute expected
statistics), a sample or mode per pair, and its parameters as plain tensors for files.

- ``gaussian``: mean and variance, the variance kept in [min_var, max_var] (EiNet's range) by a
  sigmoid. On image data values are scaled to [0, 1] (x / (levels - 1)); with ``levels`` the
  probability of a pixel value is the Gaussian's mass over its bin, as in the FedPC paper's
  Appendix E.2 (lowest and highest bins open-ended), so densities are for training and masses
  for reporting (``discrete=True``); the M-step is the Gaussian's (moments of the values).
- ``categorical``: one probability per value 0..levels-1 (pixel intensities); exact M-step.
- ``bernoulli``: binary values; exact M-step.

``floor_statistics`` holds a floor of ``min_rows`` rows (a FedPC client's privacy policy) in the
M-step: a unit whose posterior weights over the rows rest on fewer (sum q < min_rows x max q) takes
its column's statistics over all rows (``marginal_statistics``) instead.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
import torch
from torch import nn

from fedpgm.circuits.semiring import Semiring
from fedpgm.errors import FedpgmError

EPS = 1e-12


def log_normal_mass(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """log(Phi(hi) - Phi(lo)) for standardised bin edges, computed in the tail that keeps digits."""
    flip = lo > 0  # both edges in the upper tail: use the mirror image
    a = torch.where(flip, -hi, lo)
    b = torch.where(flip, -lo, hi)
    log_b, log_a = torch.special.log_ndtr(b), torch.special.log_ndtr(a)
    return log_b + torch.log1p(-torch.exp(torch.clamp(log_a - log_b, max=-1e-12)))


class InputLayer(nn.Module, ABC):
    """Shared bookkeeping: which variable each pair reads (``var``, (E,)); each kind of input
    implements the four methods below. What a kind needs is said here, once: ``extras`` (its
    constructor options beyond ``var`` and ``units``, what ``spec`` stores), ``floats`` (numbers
    per pair and unit; None: one per level), ``needs_levels`` (pixel values) and ``needs_binary``
    (binary columns)."""

    kind = ""
    extras: tuple[str, ...] = ()
    floats: int | None = None
    needs_levels = needs_binary = False
    var: torch.Tensor  # (E,) a buffer: moves with the module

    def __init__(self, var: torch.Tensor, units: int) -> None:
        super().__init__()
        self.register_buffer("var", var.long())
        self.units = units

    @property
    def n_pairs(self) -> int:
        return len(self.var)

    def values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, E) values read by each pair (NaN -> 0) and (B, E) mask of observed ones."""
        v = x[:, self.var]
        observed = ~torch.isnan(v)
        return torch.where(observed, v, torch.zeros_like(v)), observed

    def log_prob(self, x: torch.Tensor, discrete: bool = False) -> torch.Tensor:
        v, observed = self.values(x)
        return torch.where(observed[:, :, None], self.log_prob_values(v, discrete), torch.zeros((), dtype=x.dtype,
                                                                                            device=x.device))

    @abstractmethod
    def log_prob_values(self, v: torch.Tensor, discrete: bool) -> torch.Tensor:
        """(B, E, K) log-probabilities of the values v (B, E) (masses of pixel bins if ``discrete``)."""

    @abstractmethod
    def statistics(self, x: torch.Tensor, q: torch.Tensor) -> dict[str, torch.Tensor]:
        """Expected sufficient statistics summed over the batch, from posteriors q (B, E, K)."""

    def mass(self, stats: dict[str, torch.Tensor]) -> torch.Tensor:
        """(E, K) each unit's weight sum in ``statistics``' output."""
        return stats["n"]

    @abstractmethod
    def m_step(self, stats: dict[str, torch.Tensor], step: float) -> None:
        """Move parameters ``step`` of the way to the maximiser of the expected statistics."""

    def start(self, data: np.ndarray, rng: np.random.Generator) -> None:
        """Start the units from per-column statistics of ``data`` (rows, columns; NaN unobserved)
        alone, never from a row (``fedpgm.circuits.dense_estimator.DensePC.initialise``); by
        default the random start stays."""

    def extra(self) -> dict:
        """The constructor options beyond ``var`` and ``units`` (what ``spec`` stores)."""
        return {k: getattr(self, k) for k in self.extras}

    @abstractmethod
    def draw(self, units: torch.Tensor, how: Semiring, generator: torch.Generator | None) -> torch.Tensor:
        """(B, E) a sample (``Semiring.SUM``) or the mode (``MAX``) of unit ``units[b, e]`` of each pair."""


class GaussianInput(InputLayer):
    kind, extras, floats = "gaussian", ("levels", "min_var", "max_var"), 2

    def __init__(self, var, units: int, levels: int | None = None, min_var: float = 1e-3, max_var: float = 0.25,
                 init: torch.Tensor | None = None) -> None:
        super().__init__(var, units)
        if not 0 < min_var < max_var:
            raise FedpgmError(f"Gaussian variances need 0 < min_var < max_var, got {min_var}, {max_var}")
        self.levels, self.min_var, self.max_var = levels, float(min_var), float(max_var)
        e = len(var)
        mean = init if init is not None else torch.rand(e, units)
        self.mean = nn.Parameter(mean.clone().float())
        self.raw_var = nn.Parameter(torch.zeros(e, units))

    def scale(self, v: torch.Tensor) -> torch.Tensor:
        return v / (self.levels - 1) if self.levels else v

    def start(self, data, rng):
        """Each unit's mean at its column's mean plus noise of half the column's standard deviation."""
        var, scale = self.var.cpu().numpy(), (self.levels - 1) if self.levels else 1.0
        centre = np.nan_to_num(np.nanmean(data, axis=0))[var] / scale
        spread = np.nan_to_num(np.nanstd(data, axis=0))[var] / scale
        mean = centre[:, None] + 0.5 * spread[:, None] * rng.standard_normal((len(var), self.units))
        self.mean.data.copy_(torch.as_tensor(mean, dtype=torch.float32))

    @property
    def variance(self) -> torch.Tensor:
        return self.min_var + (self.max_var - self.min_var) * torch.sigmoid(self.raw_var)

    def log_prob_values(self, v, discrete):
        u = self.scale(v)[:, :, None]
        var = self.variance
        if discrete and self.levels:
            sd, half = torch.sqrt(var), 0.5 / (self.levels - 1)
            first, last = v[:, :, None] <= 0, v[:, :, None] >= self.levels - 1  # open-ended bins
            lo = torch.where(first, torch.full_like(u, -math.inf), (u - half - self.mean) / sd)
            hi = torch.where(last, torch.full_like(u, math.inf), (u + half - self.mean) / sd)
            return log_normal_mass(lo, hi)
        return -0.5 * ((u - self.mean) ** 2 / var + torch.log(2 * math.pi * var))

    def statistics(self, x, q):
        v, observed = self.values(x)
        u = self.scale(v)[:, :, None]
        q = q * observed[:, :, None]
        return {"n": q.sum(0), "s1": (q * u).sum(0), "s2": (q * u * u).sum(0)}

    def m_step(self, stats, step):
        n = stats["n"]
        keep = n > EPS
        mean = torch.where(keep, stats["s1"] / n.clamp_min(EPS), self.mean)
        var = torch.where(keep, stats["s2"] / n.clamp_min(EPS) - mean ** 2, self.variance)
        mean = (1 - step) * self.mean + step * mean
        var = ((1 - step) * self.variance + step * var).clamp(self.min_var * (1 + 1e-4), self.max_var * (1 - 1e-4))
        self.mean.data.copy_(mean)
        self.raw_var.data.copy_(torch.logit((var - self.min_var) / (self.max_var - self.min_var)))

    def draw(self, units, how, generator):
        mean = torch.gather(self.mean.expand(units.shape[0], -1, -1), 2, units[:, :, None])[:, :, 0]
        if how is Semiring.SUM:  # (a draw; MAX: the mode)
            sd = torch.sqrt(torch.gather(self.variance.expand(units.shape[0], -1, -1), 2, units[:, :, None]))[:, :, 0]
            mean = mean + sd * torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        if self.levels:
            return torch.round(mean * (self.levels - 1)).clamp(0, self.levels - 1)
        return mean


class CategoricalInput(InputLayer):
    kind, extras, needs_levels = "categorical", ("levels",), True

    def __init__(self, var, units: int, levels: int | None = None, init: torch.Tensor | None = None) -> None:
        super().__init__(var, units)
        if not levels or levels < 2:
            raise FedpgmError("categorical inputs need the number of values (levels >= 2)")
        self.levels = int(levels)
        logits = torch.randn(len(var), units, self.levels)  # softmax of standard normal logits
        self.logits = nn.Parameter(logits.float() if init is None else init.float())

    def start(self, data, rng):
        """Every unit at 0.2 x its column's value frequencies + 0.8 x uniform."""
        counts = np.stack([np.bincount(np.clip(col[~np.isnan(col)], 0, self.levels - 1).astype(np.int64),
                                       minlength=self.levels) for col in data.T]).astype(np.float64)
        freq = counts / np.maximum(counts.sum(1, keepdims=True), 1.0)  # (columns, C)
        logits = np.log(0.2 * freq[self.var.cpu().numpy()] + 0.8 / self.levels)  # (E, C)
        self.logits.data.copy_(torch.as_tensor(logits, dtype=torch.float32)[:, None, :].expand_as(self.logits))

    def log_prob_values(self, v, discrete):
        logp = torch.log_softmax(self.logits, -1)  # (E, K, C)
        idx = v.long().clamp(0, self.levels - 1)  # (B, E)
        e = torch.arange(self.n_pairs, device=v.device)
        return logp[e[None, :], :, idx].to(v.dtype)  # (B, E, K)

    def statistics(self, x, q):
        v, observed = self.values(x)
        q = (q * observed[:, :, None]).transpose(0, 1)  # (E, B, K)
        counts = torch.zeros(self.n_pairs, self.levels, q.shape[2], dtype=q.dtype, device=q.device)
        counts.scatter_add_(1, v.long().clamp(0, self.levels - 1).T[:, :, None].expand(-1, -1, q.shape[2]), q)
        return {"counts": counts.transpose(1, 2)}  # (E, K, C)

    def mass(self, stats):
        return stats["counts"].sum(-1)

    def m_step(self, stats, step):
        counts = stats["counts"] + 1e-2  # a small pseudo-count keeps every value possible
        probs = (1 - step) * torch.softmax(self.logits, -1) + step * counts / counts.sum(-1, keepdim=True)
        self.logits.data.copy_(torch.log(probs))

    def draw(self, units, how, generator):
        logp = torch.log_softmax(self.logits, -1)
        e = torch.arange(self.n_pairs, device=units.device)
        chosen = logp[e[None, :], units]  # (B, E, C)
        if how is Semiring.MAX:
            return chosen.argmax(-1).to(self.logits.dtype)
        flat = torch.multinomial(torch.exp(chosen.reshape(-1, self.levels)), 1, generator=generator)
        return flat.reshape(units.shape).to(self.logits.dtype)


class BernoulliInput(InputLayer):
    kind, floats, needs_binary = "bernoulli", 1, True

    def __init__(self, var, units: int, levels: int | None = None, init: torch.Tensor | None = None) -> None:
        super().__init__(var, units)
        p = torch.rand(len(var), units) * 0.8 + 0.1 if init is None else init
        self.logit = nn.Parameter(torch.logit(p.float()))

    def log_prob_values(self, v, discrete):
        v = v[:, :, None]
        return v * nn.functional.logsigmoid(self.logit) + (1 - v) * nn.functional.logsigmoid(-self.logit)

    def statistics(self, x, q):
        v, observed = self.values(x)
        q = q * observed[:, :, None]
        return {"n": q.sum(0), "s1": (q * v[:, :, None]).sum(0)}

    def m_step(self, stats, step):
        p = (stats["s1"] + 1e-2) / (stats["n"] + 2e-2)
        p = (1 - step) * torch.sigmoid(self.logit) + step * p
        self.logit.data.copy_(torch.logit(p.clamp(1e-6, 1 - 1e-6)))

    def draw(self, units, how, generator):
        p = torch.gather(torch.sigmoid(self.logit).expand(units.shape[0], -1, -1), 2, units[:, :, None])[:, :, 0]
        if how is Semiring.MAX:
            return (p > 0.5).to(p.dtype)
        return torch.bernoulli(p, generator=generator)


INPUT_LAYERS: dict[str, type[InputLayer]] = {c.kind: c for c in (GaussianInput, CategoricalInput, BernoulliInput)}
INPUTS = tuple(INPUT_LAYERS)


@torch.no_grad()
def marginal_statistics(layer: InputLayer, x: torch.Tensor, min_rows: int, batch: int = 4096) -> dict:
    """Each pair's ``statistics`` over all rows of x (N, variables) with weight 1, divided by the
    rows observing its variable (0 where fewer than ``min_rows`` do): shapes (E, 1, ...)."""
    total: dict = {}
    for lo in range(0, len(x), batch):
        part = layer.statistics(x[lo:lo + batch], torch.ones(len(x[lo:lo + batch]), layer.n_pairs, 1,
                                                             dtype=x.dtype, device=x.device))
        total = {k: total[k] + v if k in total else v for k, v in part.items()}
    seen = (~torch.isnan(x[:, layer.var])).sum(0).to(x.dtype)  # (E,)
    per_row = torch.where(seen >= min_rows, 1.0 / seen.clamp_min(1.0), torch.zeros_like(seen))
    return {k: v * per_row.reshape((-1,) + (1,) * (v.dim() - 1)) for k, v in total.items()}


@torch.no_grad()
def floor_statistics(layer: InputLayer, stats: dict, marginal: dict, min_rows: int) -> dict:
    """``stats`` (``layer.statistics`` summed, with "top": (E, K) each unit's largest posterior of a
    row) where every unit rests on ``min_rows`` rows: a unit whose weight sum is below min_rows x
    top (or none) takes ``marginal`` (of ``marginal_statistics``) times its weight sum (1 if none)."""
    n = layer.mass(stats)
    low = (n < min_rows * stats["top"]) | (n <= EPS)
    scale = torch.where(n > EPS, n, torch.ones_like(n))
    out = {}
    for k, v in stats.items():
        if k != "top":
            shape = low.shape + (1,) * (v.dim() - 2)
            out[k] = torch.where(low.reshape(shape), marginal[k] * scale.reshape(shape), v)
    return out
