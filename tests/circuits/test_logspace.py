"""``log_sum_exp`` against scipy on both of its ways (fold and shift-and-exp for far-apart
children), in float64 and float32, with children hundreds of nats apart, -inf pads and nodes
whose children are all -inf."""

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from fedpgm.circuits.logspace import FOLD_MAX_ARITY, FOLD_MIN, log_sum_exp


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("arity", [1, 2, FOLD_MAX_ARITY, FOLD_MAX_ARITY + 1, 8, 33])
@pytest.mark.parametrize("rows", [FOLD_MIN // 8, FOLD_MIN])
@pytest.mark.parametrize("far_apart", [False, True])
def test_log_sum_exp_equals_scipy_however_far_apart_the_children(dtype, tol, arity, rows, far_apart):
    rng = np.random.default_rng(arity)
    scores = rng.normal(size=(3, arity, rows)) * rng.choice([1.0, 300.0, 3000.0], size=(1, 1, rows))
    scores[:, -1, ::7] = -np.inf  # pads and zero weights
    scores[1, :, ::5] = -np.inf  # a node whose children are all impossible
    with np.errstate(divide="ignore"):
        expected = logsumexp(scores.astype(np.float32 if dtype == torch.float32 else float), axis=1)
    out = torch.empty(3, rows, dtype=dtype)
    log_sum_exp(torch.tensor(scores, dtype=dtype), out, far_apart)
    got = out.double().numpy()
    assert (got[np.isneginf(expected)] == -np.inf).all()
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=tol, atol=tol)

