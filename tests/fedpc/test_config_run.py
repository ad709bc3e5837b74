import math

CONFIG = """
[experiment]
dataset = "breast_cancer"
seed = 1

[[runs]]
method = "fedpc"
split = "horizontal"
clients = 3
params = {min_instances_slice = 50}

[[runs]]
method = "fcdt"
split = "vertical"
clients = 2
partition = {label_to = "all"}

[baselines]
hgb = true
fedavg = {rounds = 3}
splitnn = {epochs = 2}
"""


def test_run_config_writes_report_plot_and_table(cli, tmp_path, read_report, monkeypatch):
    from fedpgm import cli_common

    monkeypatch.setattr(cli_common.console, "_width", 160)  # (the table of 5 runs: wider than a terminal-less 80)
    config = tmp_path / "exp.toml"
    config.write_text(CONFIG)
    code, out, err = cli("run", config, "--out", tmp_path / "res")
    assert code == 0, err
    report = read_report(tmp_path / "res" / "report.json", "run")
    results = report["metrics"]["by_run"]
    assert list(results) == ["FC[PC] horizontal x3", "FedAvg MLP horizontal x3", "FC[DT] vertical x2",
                             "SplitNN MLP vertical x2", "centralized HGB"]
    assert report["settings"]["baselines"]["fedavg"] == {"rounds": 3} and report["dataset"] == "breast_cancer"
    fedpc = results["FC[PC] horizontal x3"]
    assert math.isfinite(fedpc["test_loglik"]) and fedpc["accuracy"] > 0.85
    assert report["timing"]["by_run"]["FC[PC] horizontal x3"]["relative_runtime"] > 0
    assert results["FC[DT] vertical x2"]["accuracy"] > 0.85 and results["centralized HGB"]["accuracy"] > 0.9
    sent = report["communication"]["by_run"]
    assert set(sent) == set(results) - {"centralized HGB"} and all(r["bytes"] > 0 for r in sent.values())
    assert (tmp_path / "res" / "summary.png").stat().st_size > 1000
    assert "FC[DT]" in out and "report.json" in out


def test_run_config_refuses_unknown_keys_before_running(cli, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text(CONFIG.replace("clients = 2", "clients = 2\nclusterz = 4"))
    code, _, err = cli("run", config, "--out", tmp_path / "res")
    assert code == 2 and "clusterz" in err and "allowed" in err and not (tmp_path / "res").exists()
    config.write_text(CONFIG.replace("fedavg = {rounds = 3}", "fedavg = {round = 3}"))
    code, _, err = cli("run", config, "--out", tmp_path / "res")
    assert code == 2 and "'round'" in err and not (tmp_path / "res").exists()
    config.write_text(CONFIG.replace('partition = {label_to = "all"}', 'partition = {label_to = "all"}\n'
                                                                    'params = {ensembel = "boosting"}'))
    code, _, err = cli("run", config, "--out", tmp_path / "res")
    assert code == 2 and "params: unknown key(s) ['ensembel']" in err and not (tmp_path / "res").exists()
    config.write_text(CONFIG.replace('method = "fcdt"', 'method = "xgboost"'))
    code, _, err = cli("run", config, "--out", tmp_path / "res")
    assert code == 2 and "xgboost" in err
    code, _, err = cli("run", tmp_path / "none.toml", "--out", tmp_path / "res")
    assert code == 2 and "no config file" in err


def test_run_config_refuses_values_of_the_wrong_type_before_running(cli, tmp_path):
    config = tmp_path / "bad.toml"
    for old, new, message in (("clients = 2", 'clients = "five"', "clients must be a whole number >= 1, got 'five'"),
                              ("clients = 2", "clients = 0", "clients must be a whole number >= 1, got 0"),
                              ("fedavg = {rounds = 3}", 'fedavg = {rounds = "twenty"}',
                               "[baselines] fedavg: rounds must be a whole number >= 1, got 'twenty'"),
                              ("fedavg = {rounds = 3}", "fedavg = 3", "fedavg: give true or a table"),
                              ("seed = 1", 'seed = "zero"', "seed must be a whole number >= 0, got 'zero'"),
                              ("seed = 1", "seed = 99999999999", "seed must be at most 4294967295")):
        assert old in CONFIG
        config.write_text(CONFIG.replace(old, new, 1))
        code, _, err = cli("run", config, "--out", tmp_path / "res")
        assert code == 2 and message in err, (new, err)
        assert not (tmp_path / "res").exists()
    for seed in ("-1", "99999999999"):
        code, _, err = cli("pc", "fit", "wine", "--seed", seed)
        assert code == 2 and "Invalid value for '--seed'" in err, err
