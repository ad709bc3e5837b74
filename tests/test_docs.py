"""The code on docs/python-api.md runs as written (each block in a fresh namespace, in a
temporary folder)."""

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[1] / "docs" / "python-api.md"
BLOCKS = re.findall(r"^## (.+?)\n.*?```python\n(.*?)```", PAGE.read_text(), re.S | re.M)


def test_the_page_has_a_block_per_family():
    assert [title.split(" (")[0] for title, _ in BLOCKS] == [
        "Probabilistic circuits", "Federated circuits", "Federated neural graphical models",
        "Federated concept-based models", "Cost of decentralization"]


@pytest.mark.parametrize("title, code", BLOCKS, ids=[t.split(" (")[0] for t, _ in BLOCKS])
def test_python_api_block_runs(title, code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"docs/python-api.md: {title}", "exec"), {"__name__": "__docs__"})
    assert capsys.readouterr().out.strip()  # every block prints what it computed


def test_extending_quotes_the_worked_example_as_it_is():
    """Every quoted line of docs/extending.md (those without '...') is in the example's sources."""
    root = Path(__file__).parents[1]
    sources = "\n".join((root / p).read_text() for p in ("src/fedpgm/naive_bayes.py", "src/fedpgm/federation/apps.py",
                                                          "src/fedpgm/federation/cli.py"))
    text = (root / "docs" / "extending.md").read_text()
    quoted = [line for block in re.findall(r"```python\n(.*?)```", text, re.S) for line in block.splitlines()
              if line.strip() and "..." not in line]
    assert len(quoted) >= 15
    missing = [line for line in quoted if line.split("  #")[0].rstrip() not in sources]
    assert not missing, missing
