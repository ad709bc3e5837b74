"""Shared fixtures: the real-data folder (tests that need it skip when it is absent)."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

from fedpgm.data.registry import default_data_dir  # noqa: E402


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = default_data_dir()
    if d is None or not (d / "adult").is_dir():
        pytest.skip("../shared/data (or $FEDPGM_DATA) is absent: real-dataset tests skipped")
    return d
