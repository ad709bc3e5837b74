"""Log-sum-exp over a padded middle axis, the reduction of every sum layer and of every
flattened mixture (``fedpgm.circuits.fused``).

Two ways, picked by the number of children K (measured on this project's 2-core machine,
float64, 2,048-8,192 rows):

- K <= FOLD_MAX_ARITY: a fold of ``torch.logaddexp``, one fused elementwise pass per child;
  ``torch.logsumexp`` over a middle dimension makes several passes over the whole tensor and
  was 1.2-3.5x slower.
- larger K: subtract each row's maximum, clamp at 2 log(eps) (-72 in float64, -32 in float32),
  one ``exp_`` over all children, sum, ``log_``: half the transcendental work of the fold. The
  clamp matters: ``exp`` of an argument near or below -708 (float64) returns a denormal or zero
  through a slow path, 4-10x slower per value (1.7 vs 6-19 ns here; 10 ns at exactly
  log(``finfo.tiny``)), and in a circuit's mixtures most children lie hundreds of nats below the
  best. A clamped child adds at most eps^2 to a sum of at least 1 (the best child's exp(0)), a
  relative change K eps^2 that rounding removes for any K below 1 / eps.
"""

from __future__ import annotations

import math

import torch

FOLD_MIN = 4096  # below this many (nodes x rows) values, one torch.logsumexp call beats a fold's K
FOLD_MAX_ARITY = 3  # up to this many children the logaddexp fold wins; above, shift-and-exp


def log_sum_exp(scores: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """(n, K, rows) -> ``out`` (n, rows): log sum_k exp(scores[:, k]); ``scores`` is overwritten
    when K > FOLD_MAX_ARITY. -inf children (pads, zero weights) contribute nothing; a node whose
    children are all -inf gets -inf."""
    n, arity, rows = scores.shape
    if arity == 1:
        return out.copy_(scores[:, 0])
    if arity <= FOLD_MAX_ARITY and n * rows < FOLD_MIN:
        return torch.logsumexp(scores, 1, out=out)
    if arity <= FOLD_MAX_ARITY:
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
