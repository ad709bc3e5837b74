"""The thread limits every timed section runs under."""

import torch
from threadpoolctl import threadpool_info

from fedpgm.threads import one_thread


def test_one_thread_caps_torch_and_blas_and_restores_them():
    torch.set_num_threads(2)
    before = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    with one_thread():
        assert torch.get_num_threads() == 1
        assert all(p["num_threads"] == 1 for p in threadpool_info())
    assert torch.get_num_threads() == 2
    assert {p["internal_api"]: p["num_threads"] for p in threadpool_info()} == before
