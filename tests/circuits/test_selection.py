import pytest

from fedpgm.circuits.estimator import LearnSPN
from fedpgm.circuits.selection import RUNGS, candidates, default_settings, select_learnspn
from fedpgm.data import load_dataset
from fedpgm.errors import FedpgmError


@pytest.fixture(scope="module")
def mixed():
    ds = load_dataset("synthetic:mixed", seed=0, rows=1500)
    n = len(ds.train)
    return ds.train.iloc[: n * 4 // 5], ds.train.iloc[n * 4 // 5:], ds


def test_the_starting_rule():
    assert default_settings(16181, 16) == {"min_instances_slice": 127, "threshold": 0.1}  # nltcs
    assert default_settings(1600, 180) == {"min_instances_slice": 40, "threshold": 0.3}  # dna: few rows per column
    assert default_settings(50, 3) == {"min_instances_slice": 10, "threshold": 0.3}
    assert len(candidates(16181, 16)) == 12 and {c["leaf_model"] for c in candidates(16181, 16)} == {"univariate"}
    both = candidates(16181, 16, discrete=16)  # discrete data: every point with both leaf models
    assert len(both) == 24 and {c["leaf_model"] for c in both} == {"univariate", "chow-liu"}


def test_successive_halving_keeps_the_best_and_refits_it_on_every_row(mixed):
    train, valid, ds = mixed
    model, report = select_learnspn(train, valid, ds.schema, budget_s=600, seed=0)
    rows = [t["rows"] for t in report["tried"]]
    n = len(train)
    grid = candidates(n, len(ds.schema), sum(f.discrete for f in ds.schema.features))
    assert rows.count(round(RUNGS[0] * n)) == len(grid)  # every candidate, cheaply
    assert rows.count(round(RUNGS[1] * n)) == round(len(grid) / 3)
    assert rows.count(n) == 2  # the best two of the second rung on every row
    full = [t for t in report["tried"] if t["rows"] == n]
    winner = max(full, key=lambda t: t["valid_loglik"])
    assert report["chosen"] == {k: winner[k] for k in ("min_instances_slice", "threshold", "leaf_model")}
    refit = LearnSPN(**report["chosen"], seed=0).fit(train, ds.schema)
    assert model.score(valid) == pytest.approx(refit.score(valid), abs=1e-9) == pytest.approx(winner["valid_loglik"])
    assert report["over_budget_s"] == 0.0


def test_a_spent_budget_still_returns_the_leader_fitted_on_every_row(mixed):
    train, valid, ds = mixed
    model, report = select_learnspn(train, valid, ds.schema, budget_s=1e-3, seed=0)
    assert report["tried"][-1]["rows"] == len(train) and len(report["tried"]) == 2  # one cheap fit, then the leader
    assert report["over_budget_s"] > 0 and model.score(valid) == pytest.approx(report["valid_loglik"])
    with pytest.raises(FedpgmError, match="budget must be positive"):
        select_learnspn(train, valid, ds.schema, budget_s=0)


def test_pc_fit_select_on_the_command_line(cli, tmp_path, read_report):
    code, _, err = cli("pc", "fit", "wine", "--select", "validation", "--budget-s", "30",
                       "--json", tmp_path / "r.json")
    assert code == 0, err
    report = read_report(tmp_path / "r.json", "pc fit")
    selection = report["details"]["selection"]  # (its chosen settings hold text: the leaf model)
    assert report["settings"]["params"]["min_instances_slice"] == selection["chosen"]["min_instances_slice"]
    assert selection["tried"]
    code, _, err = cli("pc", "fit", "wine", "--learner", "ratspn", "--select", "validation")
    assert code == 2 and "--select chooses LearnSPN's settings" in err


def test_searched_settings_cannot_also_be_fixed(mixed):
    train, valid, ds = mixed
    with pytest.raises(FedpgmError, match=r"\['leaf_model'\] are what the selection searches"):
        select_learnspn(train, valid, ds.schema, budget_s=10, leaf_model="chow-liu")
