"""Discrete Bayesian models of a vertical federation, and aggregation channels.

A ``DiscreteModel`` has K features with small alphabets and a joint P(X) given as a table
(shape = the alphabet sizes); a label Y with C classes drawn as Y | X, W ~ Categorical(W_g(X))
where ``groups[x]`` maps each feature vector to a parameter group g, with independent
Dirichlet(prior[g]) priors (Beta for C = 2); and N i.i.d. training samples plus one test sample.

A ``Channel`` is the aggregation mapping P(X^ | X) (shape = alphabets + (outputs,)), applied
independently to every sample. ``xor_channel(K, s)`` is the paper's X^ = X_1 xor ... xor X_K xor E,
E ~ Bern(s); ``identity_channel`` shares X itself (no privacy constraint).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpgm.errors import FedpgmError

TOL = 1e-9


@dataclass(frozen=True)
class DiscreteModel:
    """A discrete model for the cost-of-decentralization losses: the joint P(X) over K features,
    the group of each configuration, Dirichlet priors per group, and the number of training rows."""
    joint: np.ndarray  # P(X), shape (A_1, ..., A_K)
    groups: np.ndarray  # int group of each x, same shape
    prior: np.ndarray  # (G, C) Dirichlet parameters per group
    n_train: int

    def __post_init__(self) -> None:
        joint = np.asarray(self.joint, dtype=float)
        if (joint < 0).any() or abs(joint.sum() - 1) > TOL:
            raise FedpgmError(f"P(X) must be non-negative and sum to 1 (sums to {joint.sum():.6g})")
        groups = np.asarray(self.groups)
        if groups.shape != joint.shape or groups.min() < 0:
            raise FedpgmError("groups must give a non-negative group index for every x (same shape as P(X))")
        prior = np.asarray(self.prior, dtype=float)
        if prior.ndim != 2 or prior.shape[0] <= groups.max() or prior.shape[1] < 2:
            raise FedpgmError("prior must be (groups, classes >= 2) Dirichlet/Beta parameters")
        if (prior <= 0).any():
            raise FedpgmError(f"Beta/Dirichlet parameters must be > 0, got {prior.tolist()}")
        if not isinstance(self.n_train, (int, np.integer)) or self.n_train < 0:
            raise FedpgmError(f"the number of training samples must be an integer >= 0, got {self.n_train}")
        object.__setattr__(self, "joint", joint)
        object.__setattr__(self, "groups", groups.astype(int))
        object.__setattr__(self, "prior", prior)

    @property
    def k(self) -> int:
        return self.joint.ndim

    @property
    def classes(self) -> int:
        return self.prior.shape[1]


@dataclass(frozen=True)
class Channel:
    """A privacy channel P(X^ | X): what an agent shares about its features, as a table."""
    table: np.ndarray  # P(X^ | X), shape (A_1, ..., A_K, outputs)

    def check(self, model: DiscreteModel) -> None:
        t = self.table
        if t.shape[:-1] != model.joint.shape:
            raise FedpgmError(f"channel table shape {t.shape} does not fit features {model.joint.shape}")
        if (t < 0).any() or np.abs(t.sum(axis=-1) - 1).max() > TOL:
            raise FedpgmError("every row of the channel P(X^ | X) must be non-negative and sum to 1")


def identity_channel(shape: tuple[int, ...]) -> Channel:
    """X^ = X (an index over all feature vectors): collaboration without privacy."""
    n = int(np.prod(shape))
    return Channel(np.eye(n).reshape(*shape, n))


def xor_channel(k: int, s: float) -> Channel:
    """X^ = X_1 xor ... xor X_K xor E with E ~ Bern(s), for binary features."""
    if not 0.0 <= s <= 1.0:
        raise FedpgmError(f"noise s must lie in [0, 1], got {s}")
    table = np.zeros((2,) * k + (2,))
    for x in np.ndindex(*(2,) * k):
        parity = sum(x) % 2
        table[x + (parity,)] = 1 - s
        table[x + (1 - parity,)] += s
    return Channel(table)


def binary_entropy(p: float) -> float:
    """H_b(p) in nats."""
    return float(-sum(q * np.log(q) for q in (p, 1 - p) if q > 0))
