"""The paper's two examples, as the paper intends them.

Example A: K = 2 binary features, uniform marginals, P[X1 = X2] = r (so I(X1; X2) = log 2 -
H_b(r)); Y | X, W ~ Bern(W1) if X1 xor X2 = 0 else Bern(W2); W1 ~ Beta(2, 1.5),
W2 ~ Beta(1.5, 2); N = 3.

Example B: K = 3; X1, X2 as above, X3 depends on X2 only with P[X3 != X2] = 1 - r; Y through
X1 xor X2 xor X3 with the same priors; the shared aggregate is X^ = X1 xor X2 xor X3 xor E,
E ~ Bern(s) per sample, and the eps-private losses minimise over s subject to every agent's
leakage I(X^; X_k | X_-k) <= eps (eps in bits).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import brentq, minimize_scalar

from fedpgm.decentralization.engine import SCHEMES, conditional_mutual_informations, leakage, losses
from fedpgm.decentralization.model import (Channel, DiscreteModel, binary_entropy, identity_channel,
                                           xor_channel)
from fedpgm.errors import FedpgmError

# Dirichlet parameters over (y = 0, y = 1): W1 = P(Y=1 | group 0) ~ Beta(2, 1.5), W2 ~ Beta(1.5, 2)
PRIOR = np.array([[1.5, 2.0], [2.0, 1.5]])
LN2 = math.log(2)


def check_prob(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise FedpgmError(f"{name} must lie in [0, 1], got {value}")


def pair_joint(r: float) -> np.ndarray:
    check_prob("r", r)
    return np.array([[r / 2, (1 - r) / 2], [(1 - r) / 2, r / 2]])


def example_a(r: float, n: int = 3) -> DiscreteModel:
    joint = pair_joint(r)
    groups = np.array([[0, 1], [1, 0]])
    return DiscreteModel(joint, groups, PRIOR, n)


def example_b(r: float, n: int = 3) -> DiscreteModel:
    pair = pair_joint(r)
    joint = np.zeros((2, 2, 2))
    groups = np.zeros((2, 2, 2), dtype=int)
    for x1, x2, x3 in np.ndindex(2, 2, 2):
        joint[x1, x2, x3] = pair[x1, x2] * (r if x3 == x2 else 1 - r)
        groups[x1, x2, x3] = (x1 + x2 + x3) % 2
    return DiscreteModel(joint, groups, PRIOR, n)


def mutual_information_bits(r: float) -> float:
    return (LN2 - binary_entropy(r)) / LN2


def costs(loss: dict) -> dict:
    """Table I: the cost of each scheme with respect to each better one, in nats."""
    pairs = [("CL/DI", "CL/CI"), ("DL/CI", "CL/CI"), ("DL/DI", "CL/CI"), ("DL/DI", "CL/DI"),
             ("DL/DI", "DL/CI")]
    return {f"{a}-{b}": loss[a] - loss[b] for a, b in pairs}


def point(model: DiscreteModel, channel: Channel) -> dict:
    per = losses(model, channel)
    flat = {s: v["loss"] for s, v in per.items()}
    return {"losses_nats": flat, "losses_per_agent_nats": {s: v["agents"] for s, v in per.items()},
            "costs_nats": costs(flat)}


def example_a_point(r: float, n: int = 3) -> dict:
    model = example_a(r, n)
    out: dict[str, Any] = {"r": r, "n": n, "mi_bits": mutual_information_bits(r)}
    out.update(point(model, identity_channel(model.joint.shape)))
    out["conditional_mi_nats"] = conditional_mutual_informations(model)  # per agent
    return out


def max_leakage_bits(model: DiscreteModel, s: float) -> float:
    return max(leakage(model, xor_channel(model.k, s))) / LN2


def example_b_point(r: float, eps_bits: float, n: int = 3, grid: int = 11) -> dict:
    """eps-private losses of example B: each collaborative scheme minimised over the noise s."""
    if eps_bits < 0:
        raise FedpgmError(f"eps must be >= 0 bits, got {eps_bits}")
    model = example_b(r, n)
    noiseless = max_leakage_bits(model, 0.0)
    if eps_bits >= noiseless:
        s_min = 0.0
    elif eps_bits <= 0:
        s_min = 0.5
    else:  # leakage decreases from s = 0 to s = 1/2, where it is 0
        s_min = brentq(lambda s: max_leakage_bits(model, s) - eps_bits, 0.0, 0.5, xtol=1e-12)
    cache: dict[float, dict] = {}

    def at(s: float) -> dict:
        if s not in cache:
            cache[s] = {k: v["loss"] for k, v in losses(model, xor_channel(3, s)).items()}
        return cache[s]

    best: dict = {}
    for scheme in SCHEMES:
        candidates = list(np.linspace(s_min, 0.5, grid))
        values = [at(s)[scheme] for s in candidates]
        i = int(np.argmin(values))
        lo, hi = candidates[max(i - 1, 0)], candidates[min(i + 1, grid - 1)]
        if hi > lo:
            res = minimize_scalar(lambda s, scheme=scheme: at(s)[scheme], bounds=(lo, hi), method="bounded",
                                  options={"xatol": 1e-6})
            if res.fun < values[i]:
                candidates.append(res.x)
                values.append(res.fun)
                i = len(values) - 1
        best[scheme] = (values[i], candidates[i])
    flat = {s: float(v) for s, (v, _) in best.items()}
    # DL/DI shares nothing, so it does not depend on s; report the collaborative optima
    opt = {k: float(s) for k, (_, s) in best.items() if k != "DL/DI"}
    return {"r": r, "n": n, "mi_bits": mutual_information_bits(r), "eps_bits": eps_bits,
            "noiseless_leakage_bits": noiseless, "s_min_feasible": float(s_min), "s": opt,
            "leakage_bits_at_s": {k: max_leakage_bits(model, s) for k, s in opt.items()},
            "losses_nats": flat, "costs_nats": costs(flat),
            "conditional_mi_nats": conditional_mutual_informations(model)}  # per agent, no privacy


def to_bits(values: dict) -> dict:
    return {k: v / LN2 for k, v in values.items()}


def example_a_curve(n: int = 3, points: int = 21) -> list[dict]:
    """Fig. 2 analogue: losses over r in [1/2, 1], i.e. I(X1; X2) from 0 to 1 bit."""
    return [example_a_point(float(r), n) for r in np.linspace(0.5, 1.0, points)]


def example_b_curve(r: float = 0.5, n: int = 3, points: int = 13, eps_max: float = 1.2) -> list[dict]:
    """Fig. 3 analogue: eps-private losses over eps in [0, eps_max] bits."""
    return [example_b_point(r, float(e), n) for e in np.linspace(0.0, eps_max, points)]


def plot_curve(rows: list[dict], x_key: str, x_label: str, path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [row[x_key] for row in rows]
    for scheme, style in zip(SCHEMES, ("-o", "--s", "-.^", ":d")):
        ax.plot(xs, [row["losses_nats"][scheme] for row in rows], style, label=scheme, markersize=4)
    ax.set_xlabel(x_label)
    ax.set_ylabel("predictive loss (nats)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
