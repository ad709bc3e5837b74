"""Differentially private client updates with Opacus (DP-SGD).

Each client clips per-sample gradients to ``max_grad_norm`` and adds Gaussian noise whose
multiplier meets (``epsilon``, ``delta``) over ``total_epochs`` passes over its rows at sampling
rate ``batch_size / rows`` (Poisson-sampled batches, as the accounting assumes). Two scopes:

- ``training`` (default): ``total_epochs`` = every epoch the client could train (rounds x local
  epochs), so its whole training, all its updates together, is (epsilon, delta)-DP.
- ``update``: ``total_epochs`` = one round's local epochs, so each update it sends is
  (epsilon, delta)-DP: the F-CM paper's setting ("DP at the client update level"; Opacus
  calibrated to the local training configuration). Far less noise, and a weaker guarantee: the
  updates compose, and the report says how far.

The RDP accountant's history is plain JSON, kept by the client across rounds, so the epsilon it
reports is what all its updates have spent together (never above the target under
``training``); ``update_epsilon`` is what the last update alone spent. A Flower node also keeps
each run's history beside its runs (``fedpgm.federation.spending``), and a client's policy budget
(``max_epsilon``) counts its earlier runs too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fedpgm.errors import FedpgmError

if TYPE_CHECKING:
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer


DP_SCOPES = ("training", "update")


@dataclass
class DPSettings:
    """DP-SGD for a client's updates (Opacus): target epsilon over ``total_epochs``, delta,
    per-example gradient clipping norm."""
    epsilon: float
    total_epochs: int
    delta: float = 1e-5
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        if self.epsilon <= 0 or not 0 < self.delta < 1 or self.max_grad_norm <= 0 or self.total_epochs < 1:
            raise FedpgmError("differential privacy needs epsilon > 0, 0 < delta < 1, a positive clipping "
                              "norm and at least one epoch")


class ClientDP:
    """One client's DP-SGD state: noise multiplier, sampling rate and accountant. Opacus is
    imported where it is used: a Flower node starts a process per message, and most messages
    (every one without DP) would otherwise pay its import (0.8 s) for nothing."""

    def __init__(self, s: DPSettings, n_rows: int, batch_size: int, history: list | None = None) -> None:
        from opacus.accountants import RDPAccountant
        from opacus.accountants.utils import get_noise_multiplier

        self.s, self.n = s, n_rows
        self.q = min(1.0, batch_size / max(n_rows, 1))
        self.steps_per_epoch = max(1, round(1 / self.q))
        self.sigma = get_noise_multiplier(target_epsilon=s.epsilon, target_delta=s.delta, sample_rate=self.q,
                                          steps=s.total_epochs * self.steps_per_epoch, accountant="rdp")
        self.accountant = RDPAccountant()
        self.accountant.history = [tuple(h) for h in (history or [])]

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[GradSampleModule, DPOptimizer]:
        """(per-sample-gradient model, noisy clipping optimizer)."""
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        return GradSampleModule(model), DPOptimizer(optimizer, noise_multiplier=self.sigma,
                                                    max_grad_norm=self.s.max_grad_norm,
                                                    expected_batch_size=max(1, round(self.q * self.n)))

    def batches(self, gen: torch.Generator) -> list[torch.Tensor]:
        """One epoch of Poisson-sampled batches (each row in with probability q)."""
        return [torch.nonzero(torch.rand(self.n, generator=gen) < self.q).flatten()
                for _ in range(self.steps_per_epoch)]

    def step(self) -> None:
        self.accountant.step(noise_multiplier=self.sigma, sample_rate=self.q)

    @property
    def history(self) -> list:
        return [list(h) for h in self.accountant.history]

    def epsilon(self, earlier: list | None = None) -> float:
        """Spent by every update so far, composed; with ``earlier`` (accountant steps of other
        runs on the same rows, ``fedpgm.federation.spending``) composed with those too."""
        from opacus.accountants import RDPAccountant

        accountant = RDPAccountant()
        accountant.history = [tuple(h) for h in (earlier or [])] + list(self.accountant.history)
        return float(accountant.get_epsilon(self.s.delta)) if accountant.history else 0.0

    def update_epsilon(self, steps: int) -> float:
        """Spent by the last ``steps`` steps alone (one update)."""
        from opacus.accountants import RDPAccountant

        one = RDPAccountant()
        one.history = [(self.sigma, self.q, steps)]
        return float(one.get_epsilon(self.s.delta)) if steps else 0.0
