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
