"""The evaluation enum: its reductions, its downward choices and its names."""

import math

import numpy as np
import pytest
import torch

from fedpgm.circuits.semiring import Semiring
from fedpgm.errors import FedpgmError


def test_sample_names_the_sum_semiring_and_an_unknown_name_is_one_line():
    assert Semiring("sample") is Semiring.SUM and Semiring.of("max") is Semiring.MAX
    assert Semiring.SUM == "sum" and {Semiring.MAX: 1}["max"] == 1  # (a str enum keys the same entry)
    assert [s.how for s in Semiring] == ["sample", "max"]
    with pytest.raises(FedpgmError, match="how must be one of .*got 'magic'"):
        Semiring.of("magic")


def test_reduce_is_log_sum_exp_or_max_and_an_all_impossible_node_stays_impossible():
    scores = torch.tensor([[[0.0, -1.0], [math.log(3.0), -math.inf]],
                           [[-math.inf, -math.inf], [-math.inf, -math.inf]]], dtype=torch.float64)  # (2, 2, 2)
    total = Semiring.SUM.reduce(scores.clone(), torch.empty(2, 2, dtype=torch.float64))
    np.testing.assert_allclose(total[0].numpy(), [math.log(4.0), -1.0])
    best = Semiring.MAX.reduce(scores.clone(), torch.empty(2, 2, dtype=torch.float64))
    np.testing.assert_allclose(best[0].numpy(), [math.log(3.0), -1.0])
    assert torch.isneginf(total[1]).all() and torch.isneginf(best[1]).all()


def test_an_unobserved_leaf_gives_its_whole_mass_or_its_mode():
    log_mode = torch.tensor([-0.5, -2.0])
    assert Semiring.SUM.unobserved(log_mode).tolist() == [0.0, 0.0]
    assert Semiring.MAX.unobserved(log_mode).tolist() == [-0.5, -2.0]


def test_the_sum_semirings_choice_is_a_draw_in_proportion_and_max_takes_the_largest():
    probs = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    scores = torch.log(probs).expand(40_000, -1)
    gen = torch.Generator().manual_seed(0)
    drawn = Semiring.SUM.choose(scores, gen)
    freq = torch.bincount(drawn, minlength=3).double() / len(drawn)
    np.testing.assert_allclose(freq.numpy(), probs.numpy(), atol=0.01)
    assert (Semiring.MAX.choose(scores) == 1).all()
    assert Semiring.MAX.perturb(scores) is scores
