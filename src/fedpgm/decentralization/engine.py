"""Exact Bayesian predictive losses H(Y | test view, training views and labels), in nats.

Every sample carries an augmented state z = (x, x^) with P(z) = P(x) P(x^ | x). An agent sees a
*view* of z: its own feature x_k (decentralised) or (x_k, x^) (collaborative: the shared
aggregate beside its own feature). Given W, a training sample's (view v, label y) has
probability sum_g alpha[v, g] W[g, y], where alpha[v, g] = P(view v, group g). The counts
c[v, y] of the N training pairs are a sufficient statistic, so the loss is a sum over count
tables (not over the |V C|^N sequences): for each table, the multinomial coefficient times the
Dirichlet expectation of a polynomial in W, expanded exactly (closed-form Beta functions).

``SCHEMES`` gives each scheme's (training view, test view); the loss of a scheme is the max over
agents (Lemma 4.1 of the paper).
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
from scipy.special import gammaln

from fedpgm.decentralization.model import Channel, DiscreteModel
from fedpgm.errors import FedpgmError

SCHEMES = {"CL/CI": ("collab", "collab"), "CL/DI": ("collab", "local"),
           "DL/CI": ("local", "collab"), "DL/DI": ("local", "local")}
MAX_TABLES = 2_000_000


def states(model: DiscreteModel, channel: Channel) -> tuple[np.ndarray, list[tuple], np.ndarray]:
    """P(z) (Z,), the (x, x^) of each state, and its group (Z,), over states with P(z) > 0."""
    channel.check(model)
    probs, zs, groups = [], [], []
    for x in np.ndindex(*model.joint.shape):
        for xh in range(channel.table.shape[-1]):
            p = model.joint[x] * channel.table[x + (xh,)]
            if p > 0:
                probs.append(p)
                zs.append((x, xh))
                groups.append(model.groups[x])
    return np.array(probs), zs, np.array(groups)


def view_index(zs: list[tuple], kind: str, k: int) -> np.ndarray:
    """Each state's view for agent k: ``local`` = x_k, ``collab`` = (x_k, x^), ``full`` = x."""
    keys = {"local": lambda z: z[0][k], "collab": lambda z: (z[0][k], z[1]), "full": lambda z: z[0],
            "nothing": lambda z: 0}[kind]
    labels = [keys(z) for z in zs]
    lookup = {v: i for i, v in enumerate(dict.fromkeys(labels))}
    return np.array([lookup[v] for v in labels])


class Dirichlet:
    """Expectations of monomials prod W[g, c]^e[g, c] under independent Dirichlet priors."""

    def __init__(self, prior: np.ndarray) -> None:
        self.prior = prior
        self.log_norm = gammaln(prior).sum(axis=1) - gammaln(prior.sum(axis=1))
        self.cache: dict[tuple[int, ...], float] = {}  # exponents -> expectation

    def expect(self, exps: tuple[int, ...]) -> float:
        if exps not in self.cache:
            a = self.prior + np.array(exps, dtype=float).reshape(self.prior.shape)
            self.cache[exps] = float(np.exp((gammaln(a).sum(axis=1) - gammaln(a.sum(axis=1)) - self.log_norm).sum()))
        return self.cache[exps]


def expand_power(alpha_v: np.ndarray, label: int, count: int, n_classes: int) -> dict:
    """(sum_g alpha_v[g] W[g, label])^count as {exponent tuple: coefficient}."""
    groups = [g for g in range(len(alpha_v)) if alpha_v[g] > 0]
    out: dict = {}
    for split in itertools.product(range(count + 1), repeat=len(groups)):
        if sum(split) != count:
            continue
        coef = math.factorial(count)
        exps = [0] * (len(alpha_v) * n_classes)
        for g, m in zip(groups, split):
            coef *= alpha_v[g] ** m / math.factorial(m)
            exps[g * n_classes + label] = m
        out[tuple(exps)] = out.get(tuple(exps), 0.0) + coef
    return out


def multiply(a: dict, b: dict) -> dict:
    out: dict = {}
    for ea, ca in a.items():
        for eb, cb in b.items():
            e = tuple(x + y for x, y in zip(ea, eb))
            out[e] = out.get(e, 0.0) + ca * cb
    return out


def count_tables(cells: int, n: int):
    """Every vector of ``cells`` non-negative counts summing to n."""
    for bars in itertools.combinations(range(n + cells - 1), cells - 1):
        prev, counts = -1, []
        for b in bars:
            counts.append(b - prev - 1)
            prev = b
        counts.append(n + cells - 1 - prev - 1)
        yield counts


def n_count_tables(cells: int, n: int) -> int:
    return math.comb(n + cells - 1, cells - 1)


def conditional_entropy(model: DiscreteModel, pz: np.ndarray, gz: np.ndarray, train_view: np.ndarray,
                        test_view: np.ndarray) -> float:
    """H(Y_test | test view, N training (view, label) pairs) in nats, exactly."""
    C, G = model.classes, model.prior.shape[0]
    V, U = int(train_view.max()) + 1, int(test_view.max()) + 1
    alpha = np.zeros((V, G))
    np.add.at(alpha, (train_view, gz), pz)
    beta = np.zeros((U, G))
    np.add.at(beta, (test_view, gz), pz)
    cells = [(v, y) for v in range(V) for y in range(C)]
    total = n_count_tables(len(cells), model.n_train)
    if total > MAX_TABLES:
        t0, done = time.perf_counter(), 0
        for _ in itertools.islice(count_tables(len(cells), model.n_train), 2000):
            done += 1
        per_table = (time.perf_counter() - t0) / done * 20  # enumeration is ~5% of a table's cost
        raise FedpgmError(f"N={model.n_train} gives {total} training count tables over {len(cells)} "
                          f"cells (limit {MAX_TABLES}, roughly {total * per_table:.0f} s or more); "
                          "lower N")
    prior = Dirichlet(model.prior)
    powers: dict = {}
    entropy, mass = 0.0, 0.0
    log_n_fact = math.lgamma(model.n_train + 1)
    for counts in count_tables(len(cells), model.n_train):
        poly = {(0,) * (G * C): 1.0}
        log_multinomial = log_n_fact
        for (v, y), c in zip(cells, counts):
            if c == 0:
                continue
            if alpha[v].sum() == 0:
                poly = {}
                break
            key = (v, y, c)
            if key not in powers:
                powers[key] = expand_power(alpha[v], y, c, C)
            poly = multiply(poly, powers[key])
            log_multinomial -= math.lgamma(c + 1)
        if not poly:
            continue
        scale = math.exp(log_multinomial)
        # p(Y = y, test view u, table) for all u, y
        joint = np.zeros((U, C))
        for exps, coef in poly.items():
            for g in range(G):
                for y in range(C):
                    bumped = list(exps)
                    bumped[g * C + y] += 1
                    joint[:, y] += beta[:, g] * coef * prior.expect(tuple(bumped))
        joint *= scale
        mass += joint.sum()
        marg = joint.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(joint > 0, joint * np.log(joint / marg), 0.0)
        entropy -= terms.sum()
    if abs(mass - 1) > 1e-9:
        raise FedpgmError(f"internal check failed: probabilities sum to {mass}")
    return float(entropy)


def losses(model: DiscreteModel, channel: Channel) -> dict:
    """Per scheme, the loss of every agent and the scheme's loss (max over agents), in nats."""
    pz, zs, gz = states(model, channel)
    out = {}
    for scheme, (train_kind, test_kind) in SCHEMES.items():
        per_agent = [conditional_entropy(model, pz, gz, view_index(zs, train_kind, k),
                                         view_index(zs, test_kind, k)) for k in range(model.k)]
        out[scheme] = {"agents": per_agent, "loss": max(per_agent)}
    return out


def leakage(model: DiscreteModel, channel: Channel) -> list[float]:
    """I(X^; X_k | X_-k) for every agent k, in nats, exactly from P(x) P(x^ | x)."""
    channel.check(model)
    joint = model.joint[..., None] * channel.table  # P(x, x^)
    out = []
    for k in range(model.k):
        rest = joint.sum(axis=k)  # P(x_-k, x^)
        px = model.joint  # P(x)
        p_rest = model.joint.sum(axis=k)  # P(x_-k)
        with np.errstate(divide="ignore", invalid="ignore"):
            h_given_x = -np.nansum(np.where(joint > 0, joint * np.log(joint / px[..., None]), 0.0))
            h_given_rest = -np.nansum(np.where(rest > 0, rest * np.log(rest / p_rest[..., None]), 0.0))
        out.append(float(max(h_given_rest - h_given_x, 0.0)))
    return out


# Table I (no privacy): cost name -> (conditioning views without, with the extra information),
# each as (training view, test view) kinds; I(Y; A | B) = H(Y | B) - H(Y | A, B).
TABLE_I = {"CL/DI-CL/CI": (("full", "local"), ("full", "full")),
           "DL/CI-CL/CI": (("local", "full"), ("full", "full")),
           "DL/DI-CL/CI": (("local", "local"), ("full", "full")),
           "DL/DI-CL/DI": (("local", "local"), ("full", "local")),
           "DL/DI-DL/CI": (("local", "local"), ("local", "full"))}


def conditional_mutual_informations(model: DiscreteModel, entropy=None) -> dict:
    """Table I's conditional mutual informations without privacy, per agent (nats), e.g.
    I(Y; X_-k, D_-k | X_k, D_k) = H(Y | X_k, D_k) - H(Y | X, D). ``entropy`` defaults to this
    engine; ``bruteforce.entropy`` gives the independent enumeration."""
    from fedpgm.decentralization.model import identity_channel

    entropy = entropy or conditional_entropy
    pz, zs, gz = states(model, identity_channel(model.joint.shape))
    out: dict[str, list[float]] = {name: [] for name in TABLE_I}
    for k in range(model.k):
        cache: dict = {}

        def h(views, cache=cache, k=k):
            if views not in cache:
                cache[views] = entropy(model, pz, gz, view_index(zs, views[0], k),
                                       view_index(zs, views[1], k))
            return cache[views]

        for name, (less, more) in TABLE_I.items():
            out[name].append(h(less) - h(more))
    return out
