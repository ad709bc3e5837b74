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
