import io

import pytest
from rich.console import Console

from fedpgm import __version__
from fedpgm.report import SCHEMA, check_report, make_report, render

FLAT = {"dataset": "adult", "split": "vertical", "test_loglik": -12.5, "accuracy": 0.85, "n_train": 100,
        "ci95": [0.1, 0.2], "bytes_up": 2_000, "messages": 4, "rounds": 2, "left_out": {"client-2": "timeout"},
        "train_seconds": 1.5, "client_seconds": {"client-0": 0.5}, "relative_runtime": 0.3,
        "plan": "2 subspaces", "params": {"threshold": 0.3}, "settings": {"clients": 2}}


def test_every_key_lands_in_the_section_its_meaning_gives():
    r = check_report(make_report("fedpc fit", FLAT, settings={"split": "vertical", "seed": 0}))
    assert r["schema"] == SCHEMA and r["fedpgm_version"] == __version__ and r["command"] == "fedpc fit"
    assert r["dataset"] == "adult"
    assert r["settings"] == {"split": "vertical", "seed": 0, "clients": 2, "params": {"threshold": 0.3}}
    assert r["metrics"] == {"test_loglik": -12.5, "accuracy": 0.85, "n_train": 100, "ci95": [0.1, 0.2]}
    assert r["communication"] == {"bytes_up": 2_000, "messages": 4, "rounds": 2, "left_out": {"client-2": "timeout"}}
    assert r["timing"] == {"train_seconds": 1.5, "client_seconds": {"client-0": 0.5}, "relative_runtime": 0.3}
    assert r["details"] == {"plan": "2 subspaces"}  # a setting repeated with the same value is dropped


def test_a_setting_repeated_with_another_value_is_kept_as_a_result():
    r = make_report("x", {"clients": 3}, settings={"clients": 2})
    assert r["settings"]["clients"] == 2 and r["metrics"]["clients"] == 3


def test_runs_and_rows_keep_their_structure():
    r = make_report("run", {"n_train": 5}, dataset="d", runs={"A": {"accuracy": 0.9, "bytes": 10},
                                                               "B": {"accuracy": 0.8}})
    assert r["metrics"]["by_run"] == {"A": {"accuracy": 0.9}, "B": {"accuracy": 0.8}}
    assert r["communication"]["by_run"] == {"A": {"bytes": 10}} and r["metrics"]["n_train"] == 5
    rows = make_report("curve", [{"r": 0.5, "loss": 1.0}])
    assert rows["metrics"]["rows"] == [{"r": 0.5, "loss": 1.0}] and rows["dataset"] is None


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.pop("timing"), "differ from the schema"),
    (lambda r: r.update(schema="other/1"), "not a fedpgm-report/1 report"),
    (lambda r: r.update(metrics=[1, 2]), "not dicts"),
])
def test_check_report_refuses_what_is_not_the_schema(mutate, message):
    r = make_report("pc fit", FLAT)
    mutate(r)
    with pytest.raises(ValueError, match=message):
        check_report(r)


def test_render_fits_80_columns_and_shows_each_section():
    buf = io.StringIO()
    long = {**FLAT, "a_very_long_metric_name_that_would_not_fit_in_forty_characters_at_all": 1.23456789,
            "history": [{"round": i} for i in range(30)]}
    render(make_report("fedpc fit", long), Console(file=buf, width=200))
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    text = buf.getvalue()
    for expected in ("metrics", "communication", "timing", "-12.5000", "2,000", "client_seconds.client-0",
                     "30 records"):
        assert expected in text, expected


def test_results_repeating_a_nested_setting_are_dropped():
    settings = {"network": "asia", "rounds": {"per_round": 3, "train": {"lr": 0.01}}}
    r = make_report("concepts fit", {"per_round": 3, "lr": 0.01, "lr_note": "x", "task_accuracy": 0.8,
                                      "per_round_seen": 2}, settings=settings)
    assert r["metrics"] == {"task_accuracy": 0.8, "per_round_seen": 2} and r["details"] == {"lr_note": "x"}
    changed = make_report("x", {"lr": 0.02}, settings=settings)
    assert changed["metrics"] == {"lr": 0.02}  # not what was asked: kept


def test_render_shows_the_numbers_among_the_details():
    buf = io.StringIO()
    render(make_report("concepts fit", {"dp": {"scope": "update", "target_epsilon": 5.0}, "plan": "long text"}),
           Console(file=buf, width=80))
    text = buf.getvalue()
    assert "dp.target_epsilon" in text and "5.0000" in text and "long text" not in text
