"""Log-sum-exp over a padded middle axis, the reduction of every sum layer and of every
flattened mixture (``fedpgm.circuits.fused``).

Two ways (measured on this project's 2-core machine, 2,048-20,000 rows):

- a fold of ``torch.logaddexp``, one fused elementwise pass per child; ``torch.logsumexp`` over
  a middle dimension makes several passes over the whole tensor and was 1.2-3.5x slower. Sum
  layers use it: on a RAT-SPN of 17,152 edges (sums of 64 children) it ran 49,995-54,090 float32
  rows/s against 39,992-48,351 for the way below.
- ``far_apart`` with more than FOLD_MAX_ARITY children: subtract each row's maximum, clamp at
  2 log(eps) (-72 in float64, -32 in float32), one ``exp_`` over all children, sum, ``log_``.
  For a flattened mixture's terms, which mostly lie hundreds of nats below the best: ``exp``
  of an argument below -708 (float64) returns a denormal or zero through a slow path, 6-19 ns a
  value against 1.7 ns (10 ns at exactly log(``finfo.tiny``)), and ``logaddexp`` computes such
  an ``exp`` inside. A clamped child adds at most eps^2 to a sum of at least 1 (the best
  child's exp(0)), a relative change K eps^2 that rounding removes for any K below 1 / eps.
"""

from __future__ import annotations

import math

import torch

FOLD_MIN = 4096  # below this many (nodes x rows) values, one torch.logsumexp call beats a fold's K
FOLD_MAX_ARITY = 3  # far-apart children: up to this many the logaddexp fold wins; above, shift-and-exp


def log_sum_exp(scores: torch.Tensor, out: torch.Tensor, far_apart: bool = False) -> torch.Tensor:
    """(n, K, rows) -> ``out`` (n, rows): log sum_k exp(scores[:, k]); ``scores`` may be
    overwritten. -inf children (pads, zero weights) contribute nothing; a node whose children
    are all -inf gets -inf. ``far_apart``: the children usually lie hundreds of nats apart."""
    n, arity, rows = scores.shape
    if arity == 1:
        return out.copy_(scores[:, 0])
    if not far_apart or arity <= FOLD_MAX_ARITY:
        if n * rows < FOLD_MIN:
            return torch.logsumexp(scores, 1, out=out)
        torch.logaddexp(scores[:, 0], scores[:, 1], out=out)
        for k in range(2, arity):
            torch.logaddexp(out, scores[:, k], out=out)
        return out
    top = torch.amax(scores, 1)  # (n, rows)
    empty = top == -math.inf
    top.masked_fill_(empty, 0.0)
    floor = 2 * math.log(torch.finfo(scores.dtype).eps)
    scores.sub_(top[:, None]).clamp_min_(floor).exp_()
    torch.sum(scores, 1, out=out).log_().add_(top)
    return out.masked_fill_(empty, -math.inf)
