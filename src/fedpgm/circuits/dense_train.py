"""Training dense circuits: EM (stochastic online or full batch) and Adam.

EM's expected statistics come from autograd, as in EiNets: for normalised weights W, the
expected number of times each edge is used by the batch is ``W * d(sum log p)/dW``, and the
posterior of every input unit for every row is ``d(sum log p)/d(log input value)``. One backward
pass thus gives all statistics; the M-step sets each weight to its normalised count and each
input distribution to its weighted maximum-likelihood estimate.

- ``online`` (EiNet's stochastic online EM): statistics summed over ``frequency`` mini-batches
  of ``batch_size`` rows, then every parameter moves ``step`` of the way to the M-step's value.
- ``batch``: statistics over all rows, then a full M-step (step 1): the training
  log-likelihood never decreases.
- ``adam``: gradient ascent on the mean log-likelihood with Adam (``lr``).

A floor of ``min_rows`` rows (a FedPC client's privacy policy; 1: none): every EM M-step of the
inputs takes floored statistics (``dense_inputs.floor_statistics``: a unit resting on fewer rows
takes its column's). Adam has no statistics, and its steps can put a unit on a single row (a
Gaussian mean's gradient vanishes at the posterior-weighted mean, the value EM would set), so
after Adam the inputs are replaced by one floored M-step (step 1) from the trained circuit's
posteriors, starting from their state before training (a unit no row uses keeps that start): a
projection onto floored statistics, which, posteriors fixed, raises the likelihood's EM bound
except where the floor acts. The sums' weights (mixing proportions, no values) are not floored.
"""

from __future__ import annotations

import ctypes
from typing import Callable

import numpy as np
import torch

from fedpgm.circuits.dense import DenseCircuit
from fedpgm.circuits.dense_inputs import floor_statistics, marginal_statistics
from fedpgm.errors import FedpgmError

METHODS = ("online", "batch", "adam")


def expected_counts(model: DenseCircuit, x: torch.Tensor, weights: dict | None = None,
                    floor: bool = False) -> tuple[float, dict, dict, dict]:
    """Sum of log p over the batch, edge counts per weight tensor, input statistics, and the
    normalised weights the pass used (detached: the M-step starts from them). ``weights``: the
    normalised weights in force where the caller holds them (unchanged since the last batch, or
    as the last M-step left them), saving a softmax over every weight (3.5% of a batch, digits).
    ``floor``: the input statistics also hold "top", (E, K) each unit's largest posterior of a row."""
    w = model.weights() if weights is None else {k: v.detach().requires_grad_() for k, v in weights.items()}
    leaf = model.inputs.log_prob(x)
    ll = model(x, weights=w, leaf=leaf)
    keys = list(w)
    grads = torch.autograd.grad(ll.sum(), [w[k] for k in keys] + [leaf], allow_unused=True)
    counts = {k: torch.zeros_like(w[k]) if g is None else (w[k] * g).detach()  # (no mixing in small graphs)
              for k, g in zip(keys, grads)}
    weights = {k: v.detach() for k, v in w.items()}
    stats = model.inputs.statistics(x, grads[-1].detach())
    if floor:
        stats["top"] = (grads[-1].detach() * model.inputs.values(x)[1][:, :, None]).amax(0)
    return float(ll.detach().sum()), counts, stats, weights


def add(total: dict | None, part: dict) -> dict:
    """Running sums of per-batch statistics (None: nothing yet; "top": the largest)."""
    if total is None:
        return part
    return {k: torch.maximum(total[k], part[k]) if k == "top" else total[k] + part[k] for k in total}


@torch.no_grad()
def m_step(model: DenseCircuit, counts: dict, stats: dict, step: float, weights: dict,
           floor: tuple[dict, int] | None = None) -> None:
    """Move every parameter ``step`` of the way to its maximum-likelihood value given the counts;
    ``floor``: (marginal statistics, min_rows) of ``dense_inputs.floor_statistics``.

    ``weights``: the normalised weights now in force, as the E-step computed them (the model
    changes only here, so they are current; recomputing the softmax cost 2.5% of a client's
    training). It consumes ``counts`` and leaves ``weights`` holding the new normalised weights
    (for the next E-step). In-place passes over the 6M part weights of an MNIST PD circuit: at
    frequency 1 an update is a tenth of a batch's E-step."""
    for key, logits in (("part", model.part_logits), ("mix", model.mix_logits), ("root", model.root_logits)):
        old = weights[key]
        total = counts[key].sum(-1, keepdim=True)
        target = counts[key].div_(total.clamp_min(1e-300))
        if not bool((total > 0).all()):  # a unit no row used keeps its weights
            target = torch.where(total > 0, target, old)
        new = old.lerp_(target, step)  # (1 - step) old + step target, one pass
        if key == "mix":  # a used edge never dies; padding (weight 0) stays 0
            new = torch.where(new > 0, new.clamp_min(1e-30), new)
        else:  # (no padding: every weight is positive)
            new.clamp_min_(1e-30)
        torch.log(new, out=logits.data)
        weights[key] = new
    model.inputs.m_step(stats if floor is None else floor_statistics(model.inputs, stats, *floor), step)


def keep_freed_memory() -> None:
    """Ask glibc to keep freed large blocks for reuse instead of returning each to the OS.

    A training step allocates and frees the same large tensors (the outer products of every
    layer, tens of MB) every time; by default glibc maps each anew and the kernel zero-fills
    its pages on first touch, 11-18% of a CPU step (MNIST PD, K = 10). Raising the mmap and
    trim thresholds to 1 GiB keeps them in the heap. Process-wide and harmless elsewhere (the
    heap keeps up to the peak it reached); a no-op where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def batches(n: int, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    return [order[i:i + size] for i in range(0, n, size)]


def train(model: DenseCircuit, X: np.ndarray, method: str = "online", epochs: int = 5, batch_size: int = 64,
          frequency: int = 5, step: float = 0.1, lr: float = 0.05, seed: int = 0,
          progress: Callable[[int, float], None] | None = None, min_rows: int = 1) -> list[float]:
    """Fit ``model`` to X (rows, variables); returns the mean training log-likelihood per row
    after each epoch (in the training objective: densities for Gaussian inputs); ``min_rows``:
    the inputs' floor (module doc)."""
    if method not in METHODS:
        raise FedpgmError(f"unknown training method '{method}'; use one of {', '.join(METHODS)}")
    for name, value in (("epochs", epochs), ("batch_size", batch_size), ("frequency", frequency)):
        if value < 1:
            raise FedpgmError(f"{name} must be >= 1, got {value}")
    if not 0 < step <= 1:
        raise FedpgmError(f"the online EM step size must lie in (0, 1], got {step}")
    if model.device.type == "cpu":
        keep_freed_memory()
    data = torch.as_tensor(np.asarray(X, dtype=np.float32), device=model.device)
    rng = np.random.default_rng(seed)
    history = []
    w: dict | None = None  # the normalised weights in force, once an E-step has computed them
    # fused: torch's one-pass Adam kernel (CPU and CUDA) instead of a pass per update term
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True) if method == "adam" else None
    floor = (marginal_statistics(model.inputs, data, min_rows), min_rows) if min_rows > 1 else None
    start = {k: v.clone() for k, v in model.inputs.state_dict().items()} if floor and optimizer else None
    for epoch in range(epochs):
        total = 0.0
        if method == "batch":
            counts = stats = None
            for rows in batches(len(data), max(batch_size, 1024), rng):
                ll, c, s, w = expected_counts(model, data[rows], w, floor is not None)
                total, counts, stats = total + ll, add(counts, c), add(stats, s)
            assert counts is not None and stats is not None and w is not None  # (every epoch has a batch)
            m_step(model, counts, stats, 1.0, w, floor)
        elif method == "online":
            counts = stats = None
            for i, rows in enumerate(batches(len(data), batch_size, rng)):
                ll, c, s, w = expected_counts(model, data[rows], w, floor is not None)
                total, counts, stats = total + ll, add(counts, c), add(stats, s)
                if (i + 1) % frequency == 0:
                    m_step(model, counts, stats, step, w, floor)
                    counts = stats = None
            if counts is not None and stats is not None and w is not None:
                m_step(model, counts, stats, step, w, floor)
        else:
            assert optimizer is not None  # (method adam)
            for rows in batches(len(data), batch_size, rng):
                loss = -model(data[rows]).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total -= float(loss.detach()) * len(rows)
        history.append(total / len(data))  # (the statistics' pass, i.e. before each update)
        if progress is not None:
            progress(epoch + 1, history[-1])
    if floor is not None and start is not None:
        project_inputs(model, data, max(batch_size, 1024), start, floor)
    return history


def project_inputs(model: DenseCircuit, data: torch.Tensor, batch_size: int, start: dict,
                   floor: tuple[dict, int]) -> None:
    """Replace the inputs by one floored M-step (step 1) from the circuit's posteriors on ``data``,
    their state ``start`` restored first (what a unit no row uses keeps): Adam's floor."""
    stats = None
    for lo in range(0, len(data), batch_size):
        stats = add(stats, expected_counts(model, data[lo:lo + batch_size], None, True)[2])
    assert stats is not None  # (training data has rows)
    model.inputs.load_state_dict(start)
    with torch.no_grad():
        model.inputs.m_step(floor_statistics(model.inputs, stats, *floor), 1.0)
