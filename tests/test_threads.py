"""The thread limits every timed section runs under."""

import torch
from threadpoolctl import threadpool_info

from fedpgm.threads import PARALLEL_CELLS, one_thread, threads_for


def test_one_thread_caps_torch_and_blas_and_restores_them():
    torch.set_num_threads(2)
    before = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    with one_thread():
        assert torch.get_num_threads() == 1
        assert all(p["num_threads"] == 1 for p in threadpool_info())
    assert torch.get_num_threads() == 2
    assert {p["internal_api"]: p["num_threads"] for p in threadpool_info()} == before


def test_threads_for_a_small_call_is_one_thread_and_a_large_call_keeps_the_limits_around_it():
    torch.set_num_threads(2)
    before = {p["filepath"]: p["num_threads"] for p in threadpool_info()}
    with threads_for(PARALLEL_CELLS - 1):
        assert torch.get_num_threads() == 1
        assert all(p["num_threads"] == 1 for p in threadpool_info())
    assert torch.get_num_threads() == 2
    assert {p["filepath"]: p["num_threads"] for p in threadpool_info()} == before
    with threads_for(PARALLEL_CELLS):
        assert torch.get_num_threads() == 2
        assert {p["filepath"]: p["num_threads"] for p in threadpool_info()} == before
    with one_thread(), threads_for(10 * PARALLEL_CELLS):  # never more threads than the caller allows
        assert torch.get_num_threads() == 1
        assert all(p["num_threads"] == 1 for p in threadpool_info())
    assert torch.get_num_threads() == 2
