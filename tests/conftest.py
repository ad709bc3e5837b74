"""Shared fixtures: the real-data folder (tests that need it skip when it is absent), the CLI,
reports, and image folders written in MNIST's IDX format."""

import gzip
import os
from pathlib import Path

import numpy as np
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


# Tests that start Flower deployments (SuperLink, SuperNodes, the Simulation Runtime) spend most
# of their time waiting on Flower's fixed polling intervals; with pytest-xdist (``pytest -n 2
# --dist loadgroup``) they run one after another on one worker, so that their ports never race,
# while the other worker takes the rest of the suite, a file at a time (its module fixtures once).
# Not the default: on 2 cores the timing tests (budgets, deadlines) then share the CPU, and one of
# them failed in one of three runs.
DEPLOYMENT_FILES = {"test_flower.py", "test_tls.py", "test_faults.py", "test_outsider.py", "test_fedpc_flower.py",
                    "test_concepts_flower.py", "test_ngm_flower.py", "test_secure_sum_hostile.py"}
DEPLOYMENT_WORDS = ("flower", "simulation", "both_backends", "supernode", "superlink", "deployment")


def pytest_collection_modifyitems(config, items):
    for item in items:
        deployment = item.path.name in DEPLOYMENT_FILES or any(w in item.name.lower() for w in DEPLOYMENT_WORDS)
        item.add_marker(pytest.mark.xdist_group("deployments" if deployment else str(item.path)))
