"""Leaf distributions: one small class per type, in a registry (no if-chains).

Each type works on a *group* of leaves at once: parameters are stacked (padded where sizes
differ) into tensors, and ``log_prob`` maps values ``x`` of shape (rows, L) to log-densities
(rows, L). A NaN value means "marginalise this variable": the leaf returns log 1 = 0.

Parameters of one leaf are a dict of numpy arrays (what files store):

=============  ====================================================  =================
type           parameters                                            kinds
=============  ====================================================  =================
gaussian       mean (), std () >= min_std                            continuous
bernoulli      p () = P(x = 1)                                       binary
categorical    probs (k,)                                            binary, categorical, ordinal
histogram      edges (b+1,), probs (b,), mean (), std (), eps ()     continuous
=============  ====================================================  =================

The histogram leaf (Mixed SPNs' piecewise-constant density) is mixed with a Gaussian of weight
``eps`` so a value outside the training range keeps a finite density.

A floor of ``min_rows`` rows (a FedPC client's policy; 1: none) makes every parameter a statistic
of that many rows: a leaf on fewer takes its column's marginal (``floored_values``; EM's M-steps
likewise), and a histogram's edges lie on a grid (``fedpgm.circuits.bins.grid_edges``), not on
raw values.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
import torch

from fedpgm.circuits.bins import grid_edges, histogram_edges
from fedpgm.circuits.weighted import MIN_STD, mean_std_from, moments, observed, weighted_mean_std
from fedpgm.errors import FedpgmError

LOG_2PI = math.log(2 * math.pi)
LOG_ZERO = -1e30  # finite stand-in for log 0 in a linear form (0 x -inf would be NaN in a matmul)
ALPHA = 0.1  # Laplace smoothing (pseudo-count per state or bin)
HIST_EPS = 1e-3


class LeafType(ABC):
    """Interface of a leaf type; subclasses are registered in ``LEAF_TYPES`` and say what they are:
    ``kinds`` (the feature kinds it models) and ``linear`` (its log-density is linear in
    ``fedpgm.circuits.fused``'s features: the Gaussian's in z and z^2, a discrete type's in the
    value's one-hot, weighted by the logs of its ``probabilities``)."""

    name: str = ""
    kinds: tuple[str, ...] = ()
    linear = False

    @staticmethod
    @abstractmethod
    def fit(x: np.ndarray, w: np.ndarray, cardinality: int, min_std: float = MIN_STD,
            alpha: float = ALPHA, min_rows: int = 1) -> dict[str, np.ndarray]:
        """Weighted maximum-likelihood (smoothed) parameters from observed values ``x`` (n,) with
        weights ``w`` (n,); a continuous leaf's std is at least ``min_std``; ``alpha``: pseudo-count
        per state or bin; ``min_rows``: the privacy floor (``floored_values``; a histogram's bins)."""
        ...

    @staticmethod
    @abstractmethod
    def stats(x: np.ndarray, w: np.ndarray, params: dict) -> np.ndarray:
        """Weighted sufficient statistics of observed values (what EM accumulates)."""
        ...

    @classmethod
    def group_stats(cls, x: np.ndarray, w: np.ndarray, params: list[dict]) -> np.ndarray:
        """``stats`` of L leaves at once: values ``x`` (rows, L) with NaN where unobserved (no
        weight), weights ``w`` (L, rows) -> (L, S), a row per leaf, zero-padded where the leaves'
        statistics differ in length (``from_stats`` reads its own length from ``params``). One
        array, so EM's E-step sums chunks without a Python step per leaf. Types whose statistics
        are sums of per-row terms override this with one vectorised pass."""
        seen = ~np.isnan(x)
        rows = [cls.stats(x[seen[:, j], j], w[j, seen[:, j]], p) for j, p in enumerate(params)]
        out = np.zeros((len(rows), max((len(r) for r in rows), default=0)))
        for j, r in enumerate(rows):
            out[j, :len(r)] = r
        return out

    @staticmethod
    @abstractmethod
    def from_stats(stats: np.ndarray, params: dict, min_std: float = MIN_STD,
                   alpha: float = ALPHA) -> dict[str, np.ndarray]:
        """New parameters from (accumulated) sufficient statistics (a row of ``group_stats``:
        entries past the leaf's own statistics are padding)."""
        ...

    @staticmethod
    @abstractmethod
    def stack(params: list[dict]) -> dict[str, torch.Tensor]:
        """Parameters of L leaves as tensors with leading dimension L."""
        ...

    @staticmethod
    @abstractmethod
    def log_prob(x: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        """(rows, L) values -> (rows, L) log-densities (NaN not handled here)."""
        ...

    @staticmethod
    @abstractmethod
    def mode(p: dict[str, torch.Tensor]) -> torch.Tensor:
        """(L,) most probable values."""
        ...

    @staticmethod
    @abstractmethod
    def sample(p: dict[str, torch.Tensor], rows: int, gen: torch.Generator | None) -> torch.Tensor:
        """(rows, L) independent draws of every leaf."""
        ...

    @staticmethod
    @abstractmethod
    def check(params: dict[str, np.ndarray]) -> None:
        """Raise ValueError if the parameters are not a valid distribution."""
        ...

    @classmethod
    def probabilities(cls, params: dict[str, np.ndarray]) -> np.ndarray:
        """(states,) a discrete type's probability of each state (discrete types define it)."""
        raise FedpgmError(f"a {cls.name} leaf is a density over a continuous variable; it has no state probabilities")

    @classmethod
    def linear_form(cls, params: dict[str, np.ndarray], center: float = 0.0,
                    scale: float = 1.0) -> tuple[dict[str | int, float], float]:
        """A ``linear`` type's log-density as coefficients of its variable's features in
        ``fedpgm.circuits.fused`` (a discrete type: one per state, the log of its probability,
        at least ``LOG_ZERO``; a continuous one: "sq", "lin" and "obs" in z = (x - center) / scale),
        and its log-value at its mode. Discrete types have it from ``probabilities``."""
        with np.errstate(divide="ignore"):
            logp = np.maximum(np.log(cls.probabilities(params)), LOG_ZERO)
        return {s: float(lp) for s, lp in enumerate(logp)}, float(logp.max())

    @classmethod
    def location(cls, params: dict[str, np.ndarray]) -> tuple[float, float] | None:
        """A continuous linear type's (centre, spread), from which ``fedpgm.circuits.fused``
        standardises its variable; None for the others."""
        return None

    @classmethod
    def from_probabilities(cls, probs: np.ndarray) -> dict[str, np.ndarray]:
        """A discrete type's parameters for the probability of each state ``probs`` (states,)."""
        raise FedpgmError(f"a {cls.name} leaf is a density over a continuous variable; it takes no state "
                          "probabilities")


LEAF_TYPES: dict[str, type[LeafType]] = {}


def register(cls: type[LeafType]) -> type[LeafType]:
    LEAF_TYPES[cls.name] = cls
    return cls


def leaf_type(name: str) -> type[LeafType]:
    if name not in LEAF_TYPES:
        raise FedpgmError(f"unknown leaf type '{name}'; use one of {sorted(LEAF_TYPES)}")
    return LEAF_TYPES[name]


def gaussian_log_prob(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - torch.log(std) - 0.5 * LOG_2PI


@register
class Gaussian(LeafType):
    name, kinds, linear = "gaussian", ("continuous",), True

    @staticmethod
    def fit(x, w, cardinality, min_std=MIN_STD, alpha=ALPHA, min_rows=1):
        mean, std = weighted_mean_std(x, w, min_std)
        return {"mean": np.array(mean), "std": np.array(std)}

    @staticmethod
    def stats(x, w, params):
        return moments(x, w)

    @classmethod
    def group_stats(cls, x, w, params):
        v, w = observed(x, w)
        return np.stack([w.sum(1), (w * v).sum(1), (w * v * v).sum(1)], axis=1)

    @staticmethod
    def from_stats(stats, params, min_std=MIN_STD, alpha=ALPHA):
        mean, std = mean_std_from(stats, min_std)
        return {"mean": np.array(mean), "std": np.array(std)}

    @staticmethod
    def stack(params):
        return {k: torch.tensor(np.array([p[k] for p in params]), dtype=torch.float64)
                for k in ("mean", "std")}

    @staticmethod
    def log_prob(x, p):
        return gaussian_log_prob(x, p["mean"], p["std"])

    @staticmethod
    def mode(p):
        return p["mean"]

    @staticmethod
    def sample(p, rows, gen):
        z = torch.randn(rows, len(p["mean"]), generator=gen, dtype=torch.float64)
        return p["mean"] + p["std"] * z

    @classmethod
    def linear_form(cls, params, center=0.0, scale=1.0):
        mu, sd = float(params["mean"]), float(params["std"])
        r, d = scale / sd, (center - mu) / sd  # (x - mu) / sd = r z + d
        log_norm = -math.log(sd) - 0.5 * LOG_2PI
        return {"sq": -0.5 * r * r, "lin": -r * d, "obs": -0.5 * d * d + log_norm}, log_norm

    @classmethod
    def location(cls, params):
        return float(params["mean"]), float(params["std"])

    @staticmethod
    def check(params):
        if not (np.isfinite(params["mean"]) and MIN_STD <= params["std"] < np.inf):
            raise ValueError(f"a Gaussian needs a finite mean and a finite std >= {MIN_STD}")


@register
class Bernoulli(LeafType):
    name, kinds, linear = "bernoulli", ("binary",), True

    @staticmethod
    def fit(x, w, cardinality, min_std=MIN_STD, alpha=ALPHA, min_rows=1):
        return Bernoulli.from_stats(Bernoulli.stats(x, w, {}), {}, alpha=alpha)

    @staticmethod
    def stats(x, w, params):
        return np.array([w.sum(), (w * (x == 1)).sum()])

    @classmethod
    def group_stats(cls, x, w, params):
        v, w = observed(x, w)
        return np.stack([w.sum(1), (w * (v == 1)).sum(1)], axis=1)

    @staticmethod
    def from_stats(stats, params, min_std=MIN_STD, alpha=ALPHA):
        return {"p": np.array((stats[1] + alpha) / (stats[0] + 2 * alpha))}

    @staticmethod
    def stack(params):
        return {"p": torch.tensor(np.array([q["p"] for q in params]), dtype=torch.float64)}

    @staticmethod
    def log_prob(x, p):
        out = torch.where(x == 1, torch.log(p["p"]), torch.log1p(-p["p"]))
        return torch.where((x == 0) | (x == 1), out, torch.full_like(out, -math.inf))

    @staticmethod
    def mode(p):
        return (p["p"] > 0.5).to(torch.float64)

    @staticmethod
    def sample(p, rows, gen):
        u = torch.rand(rows, len(p["p"]), generator=gen, dtype=torch.float64)
        return (u < p["p"]).to(torch.float64)

    @staticmethod
    def check(params):
        if not 0.0 <= float(params["p"]) <= 1.0:
            raise ValueError("a Bernoulli needs 0 <= p <= 1")

    @staticmethod
    def probabilities(params):
        return np.array([1 - float(params["p"]), float(params["p"])])

    @staticmethod
    def from_probabilities(probs):
        return {"p": probs[1]}


@register
class Categorical(LeafType):
    name, kinds, linear = "categorical", ("binary", "categorical", "ordinal"), True

    @staticmethod
    def fit(x, w, cardinality, min_std=MIN_STD, alpha=ALPHA, min_rows=1):
        shape = {"probs": np.zeros(cardinality)}
        return Categorical.from_stats(Categorical.stats(x, w, shape), shape, alpha=alpha)

    @staticmethod
    def stats(x, w, params):
        k = len(params["probs"])
        return np.bincount(x.astype(int), weights=w, minlength=k)[:k]

    @classmethod
    def group_stats(cls, x, w, params):
        v, w = observed(x, w)  # (L, rows) each
        cards = np.array([len(p["probs"]) for p in params], dtype=np.int64)
        k = int(cards.max(initial=0))
        state = (v >= 0) & (v < cards[:, None]) & (v == np.round(v))  # (other values count in no state)
        cell = np.arange(len(v))[:, None] * k + np.where(state, v, 0).astype(np.int64)  # leaf, state -> one index
        counts = np.bincount(cell[state], weights=w[state], minlength=len(v) * k)
        return counts.astype(np.float64, copy=False).reshape(len(v), k)

    @staticmethod
    def from_stats(stats, params, min_std=MIN_STD, alpha=ALPHA):
        stats = stats[:len(params["probs"])]
        return {"probs": (stats + alpha) / (stats.sum() + alpha * len(stats))}

    @staticmethod
    def stack(params):
        k = max(len(q["probs"]) for q in params)
        table = np.zeros((len(params), k))
        for i, q in enumerate(params):
            table[i, : len(q["probs"])] = q["probs"]
        t = torch.tensor(table, dtype=torch.float64)
        return {"log_probs": torch.log(t), "probs": t}

    @staticmethod
    def log_prob(x, p):
        n_leaves, k = p["log_probs"].shape
        idx = x.nan_to_num(0.0).clamp(0, k - 1).long()
        out = p["log_probs"][torch.arange(n_leaves), idx]  # (rows, L)
        valid = (x >= 0) & (x < k) & (x == torch.round(x))
        return torch.where(valid, out, torch.full_like(out, -math.inf))

    @staticmethod
    def mode(p):
        return p["probs"].argmax(dim=1).to(torch.float64)

    @staticmethod
    def sample(p, rows, gen):
        draws = torch.multinomial(p["probs"], rows, replacement=True, generator=gen)  # (L, rows)
        return draws.T.to(torch.float64)

    @staticmethod
    def check(params):
        probs = params["probs"]
        if probs.ndim != 1 or not (probs >= 0).all() or not abs(probs.sum() - 1) <= 1e-6:
            raise ValueError("categorical probabilities must be >= 0 and sum to 1")

    @staticmethod
    def probabilities(params):
        return np.asarray(params["probs"], dtype=float)

    @staticmethod
    def from_probabilities(probs):
        return {"probs": probs}


@register
class Histogram(LeafType):
    name, kinds = "histogram", ("continuous",)

    @staticmethod
    def fit(x, w, cardinality, min_std=MIN_STD, alpha=ALPHA, min_rows=1):
        mean, std = weighted_mean_std(x, w, min_std)
        edges = grid_edges(x, w, min_rows, min_std) if min_rows > 1 else histogram_edges(x, w, min_std)
        counts, _ = np.histogram(np.clip(x, edges[0], edges[-1]), bins=edges, weights=w)
        probs = (counts + alpha) / (counts.sum() + alpha * (len(edges) - 1))
        return {"edges": edges, "probs": probs, "mean": np.array(mean), "std": np.array(std),
                "eps": np.array(HIST_EPS)}

    @staticmethod
    def stats(x, w, params):
        edges = params["edges"]
        counts, _ = np.histogram(np.clip(x, edges[0], edges[-1]), bins=edges, weights=w)
        return np.concatenate([counts, moments(x, w)])

    @staticmethod
    def from_stats(stats, params, min_std=MIN_STD, alpha=ALPHA):
        b = len(params["probs"])
        counts = stats[:b]
        mean, std = mean_std_from(stats[b:b + 3], min_std)
        return {"edges": params["edges"], "probs": (counts + alpha) / (counts.sum() + alpha * len(counts)),
                "mean": np.array(mean), "std": np.array(std), "eps": params["eps"]}

    @staticmethod
    def stack(params):
        b = max(len(q["probs"]) for q in params)
        edges = np.full((len(params), b + 1), np.inf)
        dens = np.zeros((len(params), b))
        for i, q in enumerate(params):
            e = q["edges"]
            edges[i, : len(e)] = e
            dens[i, : len(q["probs"])] = q["probs"] / np.diff(e)
        out = {"edges": torch.tensor(edges, dtype=torch.float64),
               "nbins": torch.tensor([len(q["probs"]) for q in params]),
               "log_density": torch.log(torch.tensor(dens, dtype=torch.float64))}
        for k in ("mean", "std", "eps"):
            out[k] = torch.tensor(np.array([q[k] for q in params]), dtype=torch.float64)
        return out

    @staticmethod
    def log_prob(x, p):
        edges = p["edges"]  # (L, b+1), padded with +inf
        xt = x.T.contiguous()  # (L, rows)
        nbins = p["nbins"][:, None]
        idx = torch.minimum(torch.searchsorted(edges, xt, right=True) - 1, nbins - 1)
        inside = (xt >= edges[:, :1]) & (xt <= edges.gather(1, nbins))
        hist = torch.gather(p["log_density"], 1, idx.clamp(min=0))
        hist = torch.where(inside, hist, torch.full_like(hist, -math.inf)).T
        gauss = gaussian_log_prob(x, p["mean"], p["std"])
        return torch.logaddexp(torch.log1p(-p["eps"]) + hist, torch.log(p["eps"]) + gauss)

    @staticmethod
    def mode(p):
        best = p["log_density"].argmax(dim=1, keepdim=True)
        return 0.5 * (p["edges"].gather(1, best) + p["edges"].gather(1, best + 1)).squeeze(1)

    @staticmethod
    def sample(p, rows, gen):
        L = p["edges"].shape[0]
        widths = (p["edges"][:, 1:] - p["edges"][:, :-1]).nan_to_num(0.0, posinf=0.0)
        mass = torch.exp(p["log_density"]) * widths  # (L, b)
        bins = torch.multinomial(mass, rows, replacement=True, generator=gen)  # (L, rows)
        left = p["edges"].gather(1, bins)
        u = torch.rand(L, rows, generator=gen, dtype=torch.float64)
        hist = left + u * widths.gather(1, bins)
        gauss = Gaussian.sample({"mean": p["mean"], "std": p["std"]}, rows, gen).T
        tail = torch.rand(L, rows, generator=gen, dtype=torch.float64) < p["eps"][:, None]
        return torch.where(tail, gauss, hist).T

    @staticmethod
    def check(params):
        e, q = params["edges"], params["probs"]
        if len(e) != len(q) + 1 or not (np.diff(e) > 0).all() or not abs(q.sum() - 1) <= 1e-6 \
                or not (q >= 0).all():
            raise ValueError("a histogram needs increasing edges and bin probabilities summing to 1")
        if not (MIN_STD <= params["std"] < np.inf and 0 < params["eps"] < 1):
            raise ValueError(f"a histogram's tail needs a finite std >= {MIN_STD} and 0 < eps < 1")


CONTINUOUS_LEAVES = tuple(n for n, t in LEAF_TYPES.items() if "continuous" in t.kinds)  # a learner's ``leaf``
LINEAR_LEAVES = tuple(n for n, t in LEAF_TYPES.items() if t.linear)  # what ``fedpgm.circuits.fused`` fuses


def default_leaf(kind: str, continuous: str = "gaussian") -> str:
    """The leaf type used for a feature kind (``continuous``: gaussian or histogram)."""
    return continuous if kind == "continuous" else ("bernoulli" if kind == "binary" else "categorical")
