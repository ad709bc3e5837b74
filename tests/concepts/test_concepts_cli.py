def test_fit_intervene_and_bad_input(cli, tmp_path, read_report):
    report, model = tmp_path / "r.json", tmp_path / "m"
    code, out, err = cli("concepts", "fit", "bn:asia", "--model", "cem", "--regime", "fcm", "--rows", "2000",
                         "--clients", "6", "--per-round", "3", "--join-round", "3", "--rounds", "8",
                         "--json", report, "--plot", tmp_path / "plots", "--out", model)
    assert code == 0, err
    r = read_report(report, "concepts fit")
    m, comm = r["metrics"], r["communication"]
    for key in ("task_accuracy", "concept_accuracy", "coverage", "fraction_params_changed", "val_task_loss"):
        assert key in m, key
    assert comm["bytes_up"] > 0 and comm["bytes_down"] > 0 and r["dataset"] == "asia"
    assert m["coverage"] == 1.0 and len(m["val_task_loss"]) == comm["rounds"] <= 8
    assert r["settings"]["rounds"]["train"]["lr"] == 1e-3
    assert f"{m['task_accuracy']:.4f}" in out  # the one table
    assert (tmp_path / "plots" / "asia_cem_fcm_convergence.png").stat().st_size > 1000
    code, out, err = cli("concepts", "intervene", model, "--json", tmp_path / "i.json")
    assert code == 0, err
    levels = read_report(tmp_path / "i.json", "concepts intervene")["metrics"]["intervention_accuracy"]
    assert [lv["depth"] for lv in levels] == list(range(len(levels))) and len(levels) >= 2
    code, _, err = cli("concepts", "fit", "bn:asia", "--task", "nope", "--rows", "500", "--json", tmp_path / "x.json")
    assert code == 2 and "nope" in err and not (tmp_path / "x.json").exists()
    code, _, err = cli("concepts", "fit", "bn:asia", "--clients", "4", "--per-round", "5", "--rows", "500")
    assert code == 2 and "per-round 5 exceeds" in err
    code, _, err = cli("concepts", "fit", "bn:asia", "--lr", "0", "--rows", "500", "--json", tmp_path / "y.json")
    assert code == 2 and "--lr 0.0" in err and "positive" in err and not (tmp_path / "y.json").exists()
    code, _, err = cli("concepts", "fit", "adult", "--rows", "500")
    assert code == 2 and "bn:NAME" in err


def test_fit_and_intervene_on_a_users_concept_table(cli, cancer_table, tmp_path, read_report):
    csv, manifest = cancer_table
    report, model = tmp_path / "r.json", tmp_path / "m"
    code, out, err = cli("concepts", "fit", f"csv:{csv}", "--task", "diagnosis", "--client-concepts", manifest,
                         "--rounds", "6", "--join-round", "3", "--per-round", "2", "--lr", "0.01",
                         "--json", report, "--out", model, "--plot", tmp_path / "plots")
    assert code == 0, err
    r = read_report(report, "concepts fit")
    m = r["metrics"]
    assert r["dataset"] == "csv:cancer.csv" and r["settings"]["clients"] == 4
    assert r["settings"]["client_concepts"]["hospital-d"] == ["rough", "irregular", "dense", "large"]
    # the late hospitals bring the concept 'irregular'; the model grows at their join
    assert r["details"]["joins"][0]["round"] == 3 and "irregular" in r["details"]["joins"][0]["added"]
    # six rounds: the diagnosis far above the majority class (0.63), the concepts above chance
    assert m["task_accuracy"] > 0.8 and m["concept_accuracy"] > 0.7 and m["coverage"] == 1.0
    assert (tmp_path / "plots" / "csv_cancer.csv_cgm_fcm_convergence.png").is_file()
    code, out, err = cli("concepts", "intervene", model, "--json", tmp_path / "i.json")
    assert code == 0, err
    levels = read_report(tmp_path / "i.json", "concepts intervene")["metrics"]["intervention_accuracy"]
    assert levels[0]["task_accuracy"] == m["intervention_accuracy"][0]["task_accuracy"]  # the same test rows
    for args, message in [((), "--client-concepts FILE.json"),
                          (("--client-concepts", manifest, "--rows", "9"), "--rows"),
                          (("--client-concepts", manifest, "--clients", "3"), "--clients 3 differs")]:
        code, _, err = cli("concepts", "fit", f"csv:{csv}", "--task", "diagnosis", *args, "--json", tmp_path / "x.json")
        assert code == 2 and message in err and not (tmp_path / "x.json").exists()


def test_bad_settings_fail_before_the_table_is_read(cli, cancer_table, tmp_path, monkeypatch):
    """Every setting is checked before a user's table is read: the reader fails the test if called."""
    import fedpgm.concepts.cli

    def no_data(*args, **kwargs):
        raise AssertionError("the table was read before the settings were checked")

    monkeypatch.setattr(fedpgm.concepts.cli, "table_data", no_data)
    csv, manifest = cancer_table
    for args, message in ((("--lr", "0"), "the learning rate must be positive"),
                          (("--per-round", "9"), "--per-round 9 exceeds --clients 4"),
                          (("--secure-aggregation",), "runs on the Flower backend only"),
                          (("--regime", "local", "--backend", "flower"), "trains in one place")):
        code, _, err = cli("concepts", "fit", f"csv:{csv}", "--task", "diagnosis", "--client-concepts", manifest,
                           *args, "--json", tmp_path / "x.json")
        assert code == 2 and message in err.splitlines()[-1], (args, err)
    assert not (tmp_path / "x.json").exists()
