"""How a circuit is evaluated: the sum-product or the max-product semiring, one enum for both
circuit kinds (node circuits, ``fedpgm.circuits.compiled``; dense ones, ``fedpgm.circuits.dense``).

Upward, a sum node combines its children by log-sum-exp (``SUM``: likelihoods, marginals) or by
max (``MAX``: MPE), and a leaf of an unobserved variable gives 1 (its whole mass) or its mode's
value. Downward, a sum node picks a child by a draw proportional to weight x child value
(``SUM``: conditional sampling) or by the largest (``MAX``), and a chosen leaf gives a draw or its
mode. So "sample" names the downward pass of ``SUM``: ``Semiring("sample") is Semiring.SUM``
(the CLI's ``--how sample|max``).
"""

from __future__ import annotations

from enum import Enum

import torch

from fedpgm.circuits.logspace import log_sum_exp
from fedpgm.errors import FedpgmError


class Semiring(str, Enum):
    """``SUM`` (sum-product: marginals; sampling downward) or ``MAX`` (max-product: MPE); a ``str``
    enum, so ``Semiring.SUM == "sum"`` and either keys the same dict entry."""

    SUM = "sum"
    MAX = "max"

    @classmethod
    def _missing_(cls, value):
        return cls.SUM if value == "sample" else None

    @classmethod
    def of(cls, value: "Semiring | str") -> "Semiring":
        """``value`` as a semiring; an unknown name is a ``FedpgmError`` that names the choices."""
        try:
            return cls(value)
        except ValueError:
            raise FedpgmError(f"how must be one of ('sample', 'max') (or 'sum', the same as 'sample'), "
                              f"got {value!r}") from None

    @property
    def how(self) -> str:
        """The downward pass's name (``--how``): ``"sample"`` or ``"max"``."""
        return "sample" if self is Semiring.SUM else "max"

    def reduce(self, scores: torch.Tensor, out: torch.Tensor, far_apart: bool = False) -> torch.Tensor:
        """(n, K, rows) weighted child values -> ``out`` (n, rows): each sum node's value
        (``scores`` may be overwritten; ``far_apart``: ``fedpgm.circuits.logspace.log_sum_exp``)."""
        if self is Semiring.MAX:
            return torch.amax(scores, 1, out=out)
        return log_sum_exp(scores, out, far_apart)

    def unobserved(self, log_mode: torch.Tensor) -> torch.Tensor:
        """What a leaf of an unobserved variable gives: log 1 (SUM) or its mode's log-value (MAX)."""
        return log_mode if self is Semiring.MAX else torch.zeros_like(log_mode)

    def perturb(self, scores: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """``scores`` whose argmax is the downward choice: plus Gumbel noise under SUM (a draw
        proportional to exp(score), the Gumbel-max trick), as they are under MAX."""
        if self is Semiring.MAX:
            return scores
        u = torch.rand(scores.shape, generator=generator, dtype=scores.dtype, device=scores.device)
        return scores - torch.log(-torch.log(u.clamp_min(torch.finfo(scores.dtype).tiny)))

    def choose(self, scores: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The chosen index along the last dimension (see ``perturb``)."""
        return self.perturb(scores, generator).argmax(-1)
