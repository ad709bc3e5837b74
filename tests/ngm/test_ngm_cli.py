
import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A FedNGM run on breast cancer (3 clients, one withheld feature each), saved."""
    from fedpgm.cli import main

    d = tmp_path_factory.mktemp("ngm")
    args = ["ngm", "fit", "breast_cancer", "--clients", "3", "--withhold", "worst_area", "--withhold",
            "worst_texture", "--withhold", "worst_perimeter", "--target", "mean_radius", "--target", "target",
            "--skew", "target=malignant", "--skew", "mean_area>=700", "--skew", "mean_texture",
            "--epochs", "60", "--hidden", "24", "--min-clients", "3", "--samples-factor", "1",
            "--json", d / "r.json", "--out", d / "model", "--plot", d / "plots"]
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        assert not e.code
    return d


def test_fit_reports_every_model_on_every_test_set(fitted, read_report):
    r = read_report(fitted / "r.json", "ngm fit")
    m = r["metrics"]
    assert m["released"] and r["details"]["fedngm"]["merged_edges"] > 0
    assert r["settings"]["clients"] == 3 and r["settings"]["ngm"]["hidden"] == 24
    assert {"client-0", "client-1", "client-2", "global", "global+public", "centralized"} <= set(m)
    assert set(m["global"]) == {"client-0", "client-1", "client-2", "public-test"}
    # 76 training rows per client: coarse bounds, far from chance (AUC 0.5; MAE 2.5 at the mean)
    assert 0.75 < m["global"]["public-test"]["target"]["auc"] <= 1.0
    assert 0.85 < m["centralized"]["public-test"]["target"]["auc"] <= 1.0
    assert m["centralized"]["public-test"]["mean_radius"]["mae"] < 2.2
    assert set(r["details"]["stitched"]) == {"client-0", "client-1", "client-2"}
    assert m["privacy_audit_messages"] >= 15 and r["communication"]["bytes_up"] > 0
    assert r["timing"]["wall_seconds"]["total"] > 0
    assert (fitted / "plots" / "ngm_graphs.png").stat().st_size > 1000


def test_query_and_sample(cli, fitted, tmp_path):
    rows = tmp_path / "e.csv"
    pd.DataFrame({"mean_radius": [11.0, 21.0], "mean_texture": [15.0, None]}).to_csv(rows, index=False)
    code, out, err = cli("ngm", "query", fitted / "model", "--target", "target", "--evidence", rows)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "row_id,p(target=malignant),p(target=benign)" and len(lines) == 3
    p = np.array([float(x) for x in lines[1].split(",")[1:]])
    assert abs(p.sum() - 1) < 1e-6
    small, large = (float(l.split(",")[1]) for l in lines[1:])
    assert large > small  # a large radius is more likely malignant
    code, out, err = cli("ngm", "sample", fitted / "model", "-n", "25", "--out", tmp_path / "s.csv")
    assert code == 0, err
    s = pd.read_csv(tmp_path / "s.csv")
    assert len(s) == 25 and set(s["target"]) <= {"malignant", "benign"}


def test_stitch_command(cli, fitted, tmp_path):
    from fedpgm.data import load_dataset
    from fedpgm.ngm.model import NGM

    ds = load_dataset("breast_cancer")
    model = NGM.load(fitted / "model")
    frame = ds.schema.decode(ds.train[model.names + ["worst_area"]].iloc[:300])
    frame.to_csv(tmp_path / "client.csv", index=False)
    code, out, err = cli("ngm", "stitch", fitted / "model", "--data", tmp_path / "client.csv",
                         "--out", tmp_path / "st", "--epochs", "20")
    assert code == 0, err
    assert NGM.load(tmp_path / "st").names == model.names + ["worst_area"]


def test_bad_input_exits_2_and_writes_nothing(cli, fitted, tmp_path):
    code, _, err = cli("ngm", "fit", "breast_cancer", "--clients", "2", "--min-clients", "3", "--target",
                       "mean_radius", "--json", tmp_path / "r.json", "--out", tmp_path / "m")
    assert code == 2 and "min-clients 3" in err
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "m").exists()
    code, _, err = cli("ngm", "query", fitted / "model", "--target", "nope", "--evidence", tmp_path / "x.csv")
    assert code == 2 and "target 'nope' is not in the model" in err
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"mean_radius": ["big", "small"]}).to_csv(bad, index=False)
    code, _, err = cli("ngm", "query", fitted / "model", "--target", "target", "--evidence", bad)
    assert code == 2 and "mean_radius" in err and "numbers" in err
    code, _, err = cli("ngm", "fit", "breast_cancer", "--skew", "nope=1", "--clients", "1", "--target",
                       "mean_radius", "--json", tmp_path / "r.json")
    assert code == 2 and "names no column" in err and not (tmp_path / "r.json").exists()


def test_fit_on_a_users_csv_without_stitching(cli, read_report, tmp_path):
    """csv: with a text label and missing cells, nothing withheld: the label is the target and the
    run finishes without a stitching step."""
    from sklearn.datasets import load_wine

    wine = load_wine(as_frame=True).frame
    wine["target"] = wine["target"].map({0: "barolo", 1: "grignolino", 2: "barbera"})
    wine.loc[[3, 40, 77, 120], "alcohol"] = np.nan
    wine.to_csv(tmp_path / "wine.csv", index=False)
    code, out, err = cli("ngm", "fit", f"csv:{tmp_path / 'wine.csv'}", "--label", "target", "--epochs", "30",
                         "--hidden", "24", "--samples-factor", "1", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert "no stitching: no client holds a withheld feature" in out
    r = read_report(tmp_path / "r.json", "ngm fit")
    assert r["settings"]["targets"] == ["target"] and r["metrics"]["stitched"] == {}
    assert r["details"]["comparisons"]["stitching_improves"] == {}
    assert "stitch" not in r["timing"]["wall_seconds"]
    rows = r["metrics"]["rows"]
    assert sum(rows[c]["train"] + rows[c]["test"] for c in ("client-0", "client-1", "client-2")) >= 80
    # three cultivars (majority 0.40): the centralized NGM on ~70 rows is far above it
    assert r["metrics"]["centralized"]["public-test"]["target"]["precision_micro"] > 0.6
    code, _, err = cli("ngm", "fit", f"csv:{tmp_path / 'wine.csv'}", "--json", tmp_path / "r2.json")
    assert code == 2 and "--target (or a --label)" in err


@pytest.mark.slow
def test_fit_on_flower_equals_in_process(cli, read_report, tmp_path):
    """``ngm fit --backend flower``: the same procedure in the ServerApp, every client a SuperNode
    holding its own CSV and test rows; the report and the saved global model (its merged graph,
    its predictions within 1e-3) equal the in-process ones. (``--backend simulation`` goes the
    same way through the runner: tests/ngm/test_ngm_flower.py runs the Simulation Runtime.)"""
    backends = ["inprocess", "flower"]
    args = ["ngm", "fit", "breast_cancer", "--clients", "2", "--withhold", "worst_area", "--withhold",
            "worst_texture", "--target", "target", "--epochs", "10", "--hidden", "8", "--samples-factor", "1"]
    from fedpgm.data import load_dataset
    from fedpgm.ngm.model import NGM

    reports, models = {}, {}
    for b in backends:
        code, _, err = cli(*args, "--backend", b, "--json", tmp_path / f"{b}.json", "--out", tmp_path / b)
        assert code == 0, err
        reports[b] = read_report(tmp_path / f"{b}.json", "ngm fit")
        assert reports[b]["settings"]["backend"] == b and reports[b]["metrics"]["released"]
        models[b] = NGM.load(tmp_path / b)
    local, details = reports["inprocess"]["metrics"], reports["inprocess"]["details"]
    test = load_dataset("breast_cancer", seed=0).test[models["inprocess"].schema.names]  # (the shared columns)
    for b in backends[1:]:
        remote = reports[b]["metrics"]
        timing = ("client_fit_seconds", "wall_seconds", "server_seconds")
        for key, value in details["fedngm"].items():  # rows, merged and client edge counts, ...
            assert key in timing or reports[b]["details"]["fedngm"][key] == value, key
        assert sorted(map(sorted, models[b].graph.edges())) == sorted(map(sorted, models["inprocess"].graph.edges()))
        np.testing.assert_allclose(models[b].predict(test, "mean_radius"), models["inprocess"].predict(test, "mean_radius"),
                                   rtol=1e-3, atol=1e-3)
        assert reports[b]["communication"]["bytes_up"] > 0
        assert set(reports[b]["details"]["stitched"]) == {"client-0", "client-1"}
        for model in ("client-0", "client-1", "global", "centralized"):
            for test_set in ("client-0", "client-1", "public-test"):
                auc = local[model][test_set]["target"]["auc"]
                assert remote[model][test_set]["target"]["auc"] == pytest.approx(auc, abs=1e-3), (b, model, test_set)
        for c in ("client-0", "client-1"):
            auc = details["stitched"][c]["target"]["stitched"]["auc"]
            assert reports[b]["details"]["stitched"][c]["target"]["stitched"]["auc"] == pytest.approx(auc, abs=1e-3)


def test_bad_settings_fail_before_any_data_is_read(cli, tmp_path, monkeypatch):
    """The loader is replaced by one that fails the test if called: every setting is checked first."""
    import fedpgm.ngm.experiment

    def no_data(*args, **kwargs):
        raise AssertionError("the data was read before the settings were checked")

    monkeypatch.setattr(fedpgm.ngm.experiment, "load_dataset", no_data)
    for args, message in ((("--hidden", "0"), "hidden must be >= 1"),
                          (("--sparsity", "2"), "'sparsity' parameter of FederatedNGM"),
                          (("--min-clients", "9"), "--min-clients 9 must be between 1")):
        code, _, err = cli("ngm", "fit", "wine", "--label", "target", *args, "--json", tmp_path / "r.json")
        assert code == 2 and message in err.splitlines()[-1], (args, err)
    assert not (tmp_path / "r.json").exists()
