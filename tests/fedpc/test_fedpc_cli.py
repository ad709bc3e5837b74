import io

import numpy as np
import pandas as pd

from fedpgm.data import load_dataset

REQUIRED = {"settings": ("split", "clients", "backend", "seed"),
            "metrics": ("test_loglik", "centralized_test_loglik", "accuracy", "f1_macro"),
            "timing": ("train_seconds", "critical_path_seconds", "centralized_train_seconds", "relative_runtime"),
            "communication": ("bytes_up", "bytes_down", "messages")}


def test_fit_evaluate_query(cli, tmp_path, read_report):
    model, report = tmp_path / "m", tmp_path / "r.json"
    code, out, err = cli("fedpc", "fit", "breast_cancer", "--split", "vertical", "--clients", "2", "--glue",
                         "aligned", "--clusters", "4", "--min-instances", "50", "--out", model, "--json", report)
    assert code == 0, err
    r = read_report(report, "fedpc fit")
    assert all(k in r[section] for section, keys in REQUIRED.items() for k in keys)
    assert r["dataset"] == "breast_cancer" and r["settings"]["split"] == "vertical" and r["settings"]["clients"] == 2
    m, t = r["metrics"], r["timing"]
    assert m["accuracy"] > 0.85 and "f1" in m
    assert 0.0 <= r["details"]["tuple_model"]["product_weight"] <= 1.0
    assert "masked" in r["communication"]["shared_with_server"] and "gluing: aligned, 4 clusters" in " ".join(out.split())
    assert t["relative_runtime"] == t["critical_path_seconds"] / t["centralized_train_seconds"]
    code, out, err = cli("fedpc", "evaluate", model, "breast_cancer", "--json", tmp_path / "e.json")
    assert code == 0, err
    assert read_report(tmp_path / "e.json", "fedpc evaluate")["metrics"]["test_loglik"] == m["test_loglik"]
    rows = tmp_path / "rows.csv"
    pd.DataFrame({"mean_radius": [12.0, 20.0], "mean_texture": [15.0, None]}).to_csv(rows, index=False)
    code, out, err = cli("fedpc", "query", model, "--evidence", rows, "--target", "target")
    assert code == 0, err
    assert out.splitlines()[0] == "row_id,p(target=malignant),p(target=benign)" and len(out.splitlines()) == 3
    code, out, err = cli("fedpc", "query", model, "--evidence", rows)
    assert code == 0 and "log_likelihood" in out


def test_bad_input_exits_2_and_writes_nothing(cli, tmp_path):
    for args, message in ((("--split", "diagonal"), "split"),
                          (("--split", "vertical", "--placement", "split", "--out", tmp_path / "m"), "--placement server"),
                          (("--split", "vertical", "--clusters", "100000"), "clusters requested"),
                          (("--split", "vertical", "--min-instances", "some"), "a whole number >= 1 or auto"),
                          (("--split", "vertical", "--glue", "magic"), "'magic' is not one of 'auto', 'random',"),
                          (("--split", "vertical", "--cluster-fit", "magic"), "'magic' is not one of 'learn', 'refit'"),
                          (("--split", "vertical", "--learner", "ratspn", "--restarts", "0"), "--restarts must be >= 1"),
                          (("--split", "vertical", "--align", "magic"), "'magic' is not one of 'none', 'psi'"),
                          (("--split", "vertical", "--overlap", "0.8"), "privately with align='psi' (--align psi)"),
                          (("--split", "vertical", "--overlap", "1.5"), "overlap must lie in (0, 1]")):
        code, _, err = cli("fedpc", "fit", "wine", "--clients", "2", *args, "--json", tmp_path / "r.json")
        *progress, last = err.splitlines()  # one error line, after progress lines (no terminal) if any
        assert code == 2 and last.startswith("error:") and message in last, err
        assert all(line.startswith("[") for line in progress), err
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "m").exists()
    code, _, err = cli("fedpc", "evaluate", tmp_path, "wine")
    assert code == 2 and "no fedpc.json" in err


def test_fit_fcdt_writes_a_classification_report_and_a_model(cli, tmp_path, read_report):
    model, report = tmp_path / "trees", tmp_path / "t.json"
    code, out, err = cli("fedpc", "fit", "breast_cancer", "--split", "vertical", "--clients", "3", "--learner", "tree",
                         "--label-to", "all", "--overlap", "0.9", "--align", "psi", "--out", model, "--json", report)
    assert code == 0, err
    r = read_report(report, "fedpc fit")
    m, comm = r["metrics"], r["communication"]
    assert r["details"]["method"] == "FC[DT]" and r["details"]["clients_with_trees"] == ["client-0", "client-1",
                                                                                      "client-2"]
    assert comm["alignment"]["intersection"] == round(0.9 * m["n_train"]) and comm["alignment"]["rounds"] == 4
    assert m["accuracy"] > 0.85 and comm["bytes_up"] > 0 and "test_loglik" not in m
    assert (model / "trees.json").is_file() and (model / "trees.npz").is_file()
    code, _, err = cli("fedpc", "evaluate", model, "breast_cancer", "--json", tmp_path / "e.json")
    assert code == 0, err
    assert read_report(tmp_path / "e.json", "fedpc evaluate")["metrics"]["accuracy"] == m["accuracy"]  # same rows
    evidence = tmp_path / "rows.csv"
    ds = load_dataset("breast_cancer", seed=0)
    ds.schema.decode(ds.test.head(4)).drop(columns=["target"]).to_csv(evidence, index=False)
    code, out, err = cli("fedpc", "query", model, "--evidence", evidence, "--target", "target")
    assert code == 0, err
    answers = pd.read_csv(io.StringIO(out))
    assert len(answers) == 4 and np.allclose(answers[["p(target=malignant)", "p(target=benign)"]].sum(axis=1), 1)
    code, _, err = cli("fedpc", "query", model, "--evidence", evidence)
    assert code == 2 and "FC[DT] classifier; ask it with --target target" in err
    table = tmp_path / "unlabelled.csv"
    pd.DataFrame({"a": range(100), "b": [i % 7 * 1.5 for i in range(100)]}).to_csv(table, index=False)
    code, _, err = cli("fedpc", "fit", f"csv:{table}", "--split", "horizontal", "--clients", "2",
                       "--learner", "tree", "--json", tmp_path / "x.json")
    assert code == 2 and "no label" in err and not (tmp_path / "x.json").exists()
    boosted = tmp_path / "b.json"
    code, _, err = cli("fedpc", "fit", "breast_cancer", "--split", "horizontal", "--clients", "2", "--learner", "tree",
                       "--ensemble", "boosting", "--trees", "30", "--json", boosted)
    assert code == 0, err
    r = read_report(boosted, "fedpc fit")
    m = r["metrics"]
    assert r["settings"]["params"]["ensemble"] == "boosting" and m["trees_per_client"] == 30 and m["accuracy"] > 0.9
    assert "column medians" in r["communication"]["shared_with_server"]  # what left each client
    assert all(0 < n <= 30 for n in m["trees_fitted"].values())
    code, _, err = cli("fedpc", "fit", "breast_cancer", "--split", "horizontal", "--clients", "2", "--learner", "tree",
                       "--ensemble", "stacking", "--out", tmp_path / "s", "--json", tmp_path / "s.json")
    assert code == 2 and "'stacking' is not one of 'bagging', 'boosting'" in err
    assert not (tmp_path / "s").exists() and not (tmp_path / "s.json").exists()


def test_fedpc_fit_dense_images_reports_bits_per_pixel(cli, tmp_path, read_report):
    code, out, err = cli("fedpc", "fit", "digits", "--split", "vertical", "--regions", "halves", "--clients", "2",
                         "--learner", "pd", "--pieces", "4", "--units", "3", "--epochs", "1", "--inputs",
                         "categorical", "--glue", "combinatorial", "--out", str(tmp_path / "m"),
                         "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    report = read_report(tmp_path / "r.json", "fedpc fit")
    assert report["settings"]["params"]["cell"] == 2.0  # the whole image's 8 / 4 pixels per PD cell
    assert report["details"]["plan"].startswith("2 subspaces (32 features on client-0; 32 features on client-1)")
    m, t = report["metrics"], report["timing"]
    for value in (m["test_bpd"], m["centralized_test_bpd"], t["relative_runtime"], t["critical_path_seconds"],
                  m["n_params"]):
        assert np.isfinite(value)
    code, out, err = cli("fedpc", "evaluate", str(tmp_path / "m"), "digits")
    assert code == 0 and f"{m['test_bpd']:.4f}" in out, err


def test_bad_settings_fail_before_any_data_is_read(cli, tmp_path, monkeypatch):
    """Every family setting is checked before the dataset is loaded (so before any worker starts):
    the loader is replaced by one that fails the test if called."""
    import fedpgm.data

    def no_data(*args, **kwargs):
        raise AssertionError("the data was read before the settings were checked")

    monkeypatch.setattr(fedpgm.data, "load_dataset", no_data)
    for args, message in ((("--threshold", "7"), "'threshold' parameter of LearnSPN"),
                          (("--alpha", "-1"), "'alpha' parameter of LearnSPN"),
                          (("--min-clients", "3"), "--min-clients must lie in 1..2"),
                          (("--learner", "tree", "--max-depth", "0"), "max_depth"),
                          (("--align", "psi", "--min-clients", "1"), "min_clients and PSI alignment do not mix"),
                          (("--leaf", "magic"), "'magic' is not one of"),
                          (("--learner", "magic"), "'learner' parameter of FederatedPC")):
        code, _, err = cli("fedpc", "fit", "wine", "--split", "horizontal", "--clients", "2", *args, "--json", tmp_path / "r.json")
        assert code == 2 and message in err.splitlines()[-1], (args, err)
    assert not (tmp_path / "r.json").exists()


def test_a_narrow_table_degrades_to_the_clients_its_columns_allow(cli, tmp_path, read_report):
    """4 feature columns asked for 8 vertical clients: each of 4 clients holds one, with a note;
    a hybrid split keeps a shared column and gives the other 3 one client each."""
    from sklearn.datasets import load_iris

    iris = load_iris(as_frame=True).frame
    iris["target"] = iris["target"].map({0: "setosa", 1: "versicolor", 2: "virginica"})
    iris.to_csv(tmp_path / "iris.csv", index=False)
    for split, used in (("vertical", 4), ("hybrid", 3)):
        code, _, err = cli("fedpc", "fit", f"csv:{tmp_path / 'iris.csv'}", "--label", "target", "--split", split,
                           "--clients", "8", "--no-centralized", "--json", tmp_path / f"{split}.json")
        assert code == 0, err
        assert f"has columns for {used} {split} clients of their own, not 8; fitting with {used}" in err
        r = read_report(tmp_path / f"{split}.json", "fedpc fit")
        assert r["settings"]["clients"] == used and r["settings"]["clients_requested"] == 8, r
        assert r["metrics"]["accuracy"] > 0.6  # three species (chance 0.33)
