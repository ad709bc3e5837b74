"""Shared fixtures: the real-data folder (tests that need it skip when it is absent), the CLI,
reports, and image folders written in MNIST's IDX format; a pytest-xdist worker dies with the
pytest process that started it."""

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

from fedpgm.data.registry import default_data_dir  # noqa: E402


def pytest_configure(config):
    """In a pytest-xdist worker (``make test`` runs two): exit as soon as the pytest process that
    started it is gone, whatever ended it (a killed pytest would leave its workers running the
    rest of their tests for seconds); the worker's reaper then stops the deployments it started
    (``fedpgm.federation.lifecycle``)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from fedpgm.federation.lifecycle import watch_parent

        watch_parent()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = default_data_dir()
    if d is None or not (d / "adult").is_dir():
        pytest.skip("../shared/data (or $FEDPGM_DATA) is absent: real-dataset tests skipped")
    return d


@pytest.fixture
def cli(capsys):
    """Run the ``fedpgm`` CLI in-process: ``code, out, err = cli("datasets")``."""
    from fedpgm.cli import main

    def run(*args):
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            code = e.code or 0
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def read_report():
    """``read_report(path, "pc fit")``: a ``--json`` report, checked against the one schema
    (fedpgm.report) and the command that wrote it."""
    import json

    from fedpgm import __version__
    from fedpgm.report import check_report

    def read(path, command: str) -> dict:
        report = check_report(json.loads(Path(path).read_text()))
        assert report["command"] == command and report["fedpgm_version"] == __version__
        return report

    return read


def idx(values: np.ndarray, magic: int) -> bytes:
    head = magic.to_bytes(4, "big") + b"".join(int(s).to_bytes(4, "big") for s in values.shape)
    return head + values.astype(np.uint8).tobytes()


def write_mnist(folder, n_train=30, n_test=10, shape=(4, 5), zipped=True, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    data = {}
    for part, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, *shape))
        y = rng.integers(0, 10, n)
        data[part] = (x, y)
        for stem, arr, magic in ((f"{part}-images-idx3-ubyte", x, 0x803), (f"{part}-labels-idx1-ubyte", y, 0x801)):
            raw = idx(arr, magic)
            if zipped:
                (folder / (stem + ".gz")).write_bytes(gzip.compress(raw))
            else:
                (folder / stem).write_bytes(raw)
    return data


@pytest.fixture
def idx_bytes():
    """``idx_bytes(values, magic)``: an array as the bytes of an IDX file."""
    return idx


@pytest.fixture(name="write_mnist")
def write_mnist_fixture():
    """``write_mnist(folder, n_train=30, n_test=10, shape=(4, 5), zipped=True, seed=0)``: a folder
    of random MNIST-format images and labels; returns {part: (images, labels)}."""
    return write_mnist
