
import numpy as np

from fedpgm.decentralization.estimates import estimate


def test_estimate_is_consistent_on_breast_cancer():
    r = estimate("breast_cancer", clients=2, seed=0, min_instances=50, threshold=0.1, rounds=200)
    assert set(r["agents"]) == {"client-0", "client-1"}
    cols = [set(a["columns"]) for a in r["agents"].values()]
    assert cols[0].isdisjoint(cols[1]) and len(cols[0] | cols[1]) == 30
    for a in r["agents"].values():
        # paired differences are differences of the reported means
        assert np.isclose(a["DL/DI-CL/CI"]["nats"], a["DL/DI"]["nats"] - r["CL/CI"]["log_loss_nats"])
        lo, hi = a["DL/DI"]["ci95"]
        assert lo <= a["DL/DI"]["nats"] <= hi
    assert 0 < r["CL/CI"]["log_loss_nats"] < np.log(2)  # better than a coin


def test_cli_examples_write_json_and_plots(cli, tmp_path, read_report):
    code, out, err = cli("decentralization", "example-a", "--r", "0.8", "--json", tmp_path / "a.json")
    assert code == 0, err
    report = read_report(tmp_path / "a.json", "decentralization example-a")
    a = report["metrics"]
    assert report["settings"] == {"r": 0.8, "n": 3}
    assert {"mi_bits", "losses_nats", "costs_nats", "conditional_mi_nats"} <= set(a)
    for k, v in a["conditional_mi_nats_enumeration"].items():
        assert abs(max(v) - a["costs_nats"][k]) < 1e-9
    code, _, err = cli("decentralization", "example-b", "--r", "0.5", "--eps", "0.3", "--n", "2",
                       "--json", tmp_path / "b.json")
    assert code == 0, err
    report = read_report(tmp_path / "b.json", "decentralization example-b")
    b = report["metrics"]
    assert report["settings"]["eps_bits"] == 0.3 and set(b["s"]) == {"CL/CI", "CL/DI", "DL/CI"}
    assert {"mi_bits", "s", "losses_nats", "costs_nats", "conditional_mi_nats"} <= set(b)
    assert "conditional_mi_nats_enumeration" in b
    code, _, err = cli("decentralization", "example-a", "--curve", "--plot", tmp_path / "fig2.png",
                       "--json", tmp_path / "curve.json")
    assert code == 0, err and (tmp_path / "fig2.png").stat().st_size > 1000
    assert len(read_report(tmp_path / "curve.json", "decentralization example-a")["metrics"]["rows"]) == 21


def test_cli_bad_input(cli):
    for args, message in ((["example-a", "--r", "2"], "r must lie in [0, 1]"),
                          (["example-b", "--eps", "-0.5"], "eps must be >= 0"),
                          (["example-a", "--n", "500"], "lower N"),
                          (["estimate", "synthetic:gmm"], "needs a discrete label")):
        code, _, err = cli("decentralization", *args)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_cli_estimate_writes_the_report_schema(cli, tmp_path, read_report):
    code, out, err = cli("decentralization", "estimate", "breast_cancer", "--clients", "2", "--min-instances", "50",
                         "--threshold", "0.1", "--rounds", "50", "--json", tmp_path / "e.json")
    assert code == 0, err
    report = read_report(tmp_path / "e.json", "decentralization estimate")
    direct = estimate("breast_cancer", clients=2, seed=0, min_instances=50, threshold=0.1, rounds=50)
    assert report["metrics"]["CL/CI"]["log_loss_nats"] == direct["CL/CI"]["log_loss_nats"]
    assert report["settings"]["bootstrap_rounds"] == 50 and report["settings"]["learner"]["min_instances_slice"] == 50
    assert set(report["details"]["agents"]) == {"client-0", "client-1"}
    assert max(len(line) for line in out.splitlines()) <= 80  # the per-agent table fits 80 columns
