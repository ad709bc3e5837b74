"""Synthetic tables with known ground truth: ``synthetic:gmm`` and ``synthetic:mixed``.

The generating distribution is fixed (its parameters come from a fixed generator seed); the
load ``seed`` only draws the rows, so different seeds are samples of one distribution. The
truth is ``Dataset.truth`` and gives exact log-densities (nats) of any rows, so learners can be
judged against the best possible test log-likelihood.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import logsumexp

from fedpgm.data.dataset import Dataset, table
from fedpgm.data.loaders import finish
from fedpgm.data.registry import LoadOptions, register
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError

DEFAULT_ROWS = 5_000
TRUTH_SEED = 20240601


@dataclass(frozen=True)
class GaussianMixtureTruth:
    """A full-covariance Gaussian mixture: weights (K,), means (K, D), covariances (K, D, D)."""

    names: tuple[str, ...]
    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Rows of shape (n, D)."""
        z = rng.choice(len(self.weights), size=n, p=self.weights)
        chol = np.linalg.cholesky(self.covariances)  # (K, D, D)
        eps = rng.standard_normal((n, self.means.shape[1]))
        return self.means[z] + np.einsum("nij,nj->ni", chol[z], eps)

    def log_density(self, frame: pd.DataFrame) -> np.ndarray:
        """log p(x) per row, shape (rows,); rows must be complete."""
        x = frame[list(self.names)].to_numpy(dtype=float)
        if np.isnan(x).any():
            raise FedpgmError("the Gaussian-mixture truth needs complete rows (no NaN)")
        from scipy.stats import multivariate_normal  # (0.5 s to import: only where a truth is scored)

        comps = [np.log(w) + multivariate_normal(m, c).logpdf(x).reshape(-1)
                 for w, m, c in zip(self.weights, self.means, self.covariances)]
        return logsumexp(np.stack(comps, axis=1), axis=1)


@dataclass(frozen=True)
class MixedMixtureTruth:
    """A latent-class model: K clusters, features independent given the cluster.

    ``params[name]`` is (K, 2) mean/std for a continuous feature, or (K, cardinality)
    probabilities for a discrete one.
    """

    schema: Schema
    weights: np.ndarray
    params: dict[str, np.ndarray]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        z = rng.choice(len(self.weights), size=n, p=self.weights)
        cols = []
        for f in self.schema.features:
            p = self.params[f.name][z]
            if f.discrete:
                u = rng.random((n, 1))
                cols.append((u > np.cumsum(p, axis=1)).sum(axis=1).clip(max=f.cardinality - 1))
            else:
                cols.append(p[:, 0] + p[:, 1] * rng.standard_normal(n))
        return np.column_stack(cols)

    def log_density(self, frame: pd.DataFrame) -> np.ndarray:
        """log p(x) per row, shape (rows,); NaN entries are marginalised out."""
        n = len(frame)
        joint = np.tile(np.log(self.weights), (n, 1))  # (rows, K)
        for f in self.schema.features:
            x = frame[f.name].to_numpy(dtype=float)
            seen = ~np.isnan(x)
            p = self.params[f.name]
            if f.discrete:
                term = np.log(p[:, x[seen].astype(int)]).T
            else:
                mu, sd = p[:, 0], p[:, 1]
                term = -0.5 * ((x[seen, None] - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)
            joint[seen] += term
        return logsumexp(joint, axis=1)


def gmm_truth() -> GaussianMixtureTruth:
    rng = np.random.default_rng(TRUTH_SEED)
    k, d = 4, 6
    means = rng.normal(0.0, 3.0, size=(k, d))
    a = rng.normal(0.0, 1.0, size=(k, d, d))
    covs = a @ a.transpose(0, 2, 1) / d + 0.2 * np.eye(d)
    weights = rng.dirichlet(np.full(k, 5.0))
    return GaussianMixtureTruth(tuple(f"x{i}" for i in range(d)), weights, means, covs)


def mixed_truth() -> MixedMixtureTruth:
    rng = np.random.default_rng(TRUTH_SEED + 1)
    k = 3
    feats = [Feature("c0", "continuous"), Feature("c1", "continuous"), Feature("c2", "continuous"),
             Feature("b0", "binary", ("no", "yes")), Feature("b1", "binary", ("no", "yes")),
             Feature("k0", "categorical", ("a", "b", "c", "d")),
             Feature("k1", "categorical", ("red", "green", "blue")),
             Feature("o0", "ordinal", ("1", "2", "3", "4", "5")),
             Feature("y", "binary", ("0", "1"))]
    schema = Schema(tuple(feats), "y")
    params = {}
    for f in feats:
        if f.discrete:
            params[f.name] = rng.dirichlet(np.full(f.cardinality, 0.7), size=k)
        else:
            params[f.name] = np.column_stack([rng.normal(0, 2.5, k), rng.uniform(0.5, 1.5, k)])
    return MixedMixtureTruth(schema, rng.dirichlet(np.full(k, 5.0)), params)


GENERATORS = {"gmm": "6-D Gaussian mixture, 4 full-covariance components",
              "mixed": "latent-class model: 3 continuous, 2 binary, 2 categorical, 1 ordinal, label y"}


@register("synthetic", "generated data with exact ground-truth densities: synthetic:gmm, "
          f"synthetic:mixed (--rows, default {DEFAULT_ROWS})", family=True,
          options=("rows", "test_size", "missing"), members=lambda o: sorted(GENERATORS))
def load_synthetic(kind: str, options: LoadOptions) -> Dataset:
    if kind not in GENERATORS:
        raise FedpgmError(f"unknown synthetic generator '{kind}'; use one of {sorted(GENERATORS)}")
    truth: GaussianMixtureTruth | MixedMixtureTruth
    if kind == "gmm":
        truth = gmm_truth()
        schema = Schema(tuple(Feature(n, "continuous") for n in truth.names))
    else:
        truth = mixed_truth()
        schema = truth.schema
    rows = options.rows or DEFAULT_ROWS
    values = truth.sample(rows, np.random.default_rng(options.seed))
    dataset = finish(f"synthetic:{kind}", table(values, schema.names), schema, options,
                     source=GENERATORS[kind], sampling=f"{rows} rows, seed {options.seed}")
    dataset.truth = truth
    return dataset
