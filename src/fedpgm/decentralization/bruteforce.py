"""An independent check of the engine: enumerate every ordered training sequence.

No sufficient statistics and no Beta-function algebra: each sequence of N (state, label) pairs
plus the test pair gets its probability from Gauss-Jacobi quadrature of the Beta priors (exact for
these polynomial integrands), and H(Y | test view, the ordered training views and labels) is
summed over sequences. Binary labels only; cost |Z x 2|^(N+1), so small N.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
from scipy.special import roots_jacobi

from fedpgm.decentralization.model import DiscreteModel

NODES = 40  # exact for polynomial degree < 80


def beta_moments(prior: np.ndarray, n: int):
    """E[W^a (1 - W)^b] for W ~ Beta(prior[1], prior[0]) (W = P(y = 1)) by quadrature."""
    x, w = roots_jacobi(NODES, prior[0] - 1, prior[1] - 1)  # weight (1-x)^(b-1) (1+x)^(a-1)
    p1 = (1 + x) / 2
    norm = w.sum()
    table = np.zeros((n + 2, n + 2))
    for a in range(n + 2):
        for b in range(n + 2 - a):
            table[a, b] = (w * p1**a * (1 - p1) ** b).sum() / norm
    return table


def entropy(model: DiscreteModel, pz: np.ndarray, gz: np.ndarray, train_view: np.ndarray,
            test_view: np.ndarray) -> float:
    """H(Y | test view, ordered training (view, label) pairs), nats."""
    if model.classes != 2:
        raise ValueError("the brute-force check handles binary labels")
    n, G = model.n_train, model.prior.shape[0]
    moments = [beta_moments(model.prior[g], n) for g in range(G)]
    joint: dict = defaultdict(lambda: np.zeros(2))
    pairs = [(z, y) for z in range(len(pz)) for y in (0, 1)]
    for seq in itertools.product(pairs, repeat=n):
        p_seq = np.prod([pz[z] for z, _ in seq])
        key_train = tuple((train_view[z], y) for z, y in seq)
        for z in range(len(pz)):
            for y in (0, 1):
                ones, zeros = np.zeros(G, int), np.zeros(G, int)
                for zz, yy in seq + ((z, y),):
                    (ones if yy else zeros)[gz[zz]] += 1
                p = p_seq * pz[z] * np.prod([moments[g][ones[g], zeros[g]] for g in range(G)])
                joint[(key_train, test_view[z])][y] += p
    total, h = 0.0, 0.0
    for probs in joint.values():
        total += probs.sum()
        m = probs.sum()
        h -= sum(q * np.log(q / m) for q in probs if q > 0)
    assert abs(total - 1) < 1e-9, total
    return float(h)



def conditional_mutual_informations(model: DiscreteModel) -> dict:
    """Table I's conditional mutual informations per agent, every entropy by enumeration."""
    from fedpgm.decentralization import engine

    return engine.conditional_mutual_informations(model, entropy=entropy)
