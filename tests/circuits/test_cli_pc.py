import json

import pytest


def test_pc_fit_report_save_and_query(cli, tmp_path):
    code, out, err = cli("pc", "fit", "synthetic:mixed", "--rows", "1500", "--out",
                         str(tmp_path / "m"), "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    for key in ("dataset", "learner", "n_train", "n_test", "n_features", "train_seconds", "test_loglik",
                "n_nodes", "n_edges", "n_params"):
        assert key in report
    assert report["n_train"] == 1200 and report["n_features"] == 9 and report["test_loglik"] < 0
    ev = tmp_path / "ev.csv"
    ev.write_text("c0,k0,y\n0.5,a,\n-1.0,,1\n")
    code, out, _ = cli("pc", "query", str(tmp_path / "m"), "--evidence", str(ev), "--target", "y")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0] == "row_id,p(y=0),p(y=1)" and len(lines) == 3
    p = [float(v) for v in lines[1].split(",")[1:]]
    assert abs(sum(p) - 1) < 1e-9
    code, out, _ = cli("pc", "query", str(tmp_path / "m"), "--evidence", str(ev), "--mpe")
    assert code == 0 and out.splitlines()[1].startswith("0,0.5,")


@pytest.mark.parametrize("args, message", [
    (["pc", "fit", "wine", "--min-instances", "0"], "--min-instances must be >= 1"),
    (["pc", "fit", "wine", "--learner", "tree"], "unknown learner 'tree'"),
    (["pc", "fit", "wine", "--threshold", "3"], "The 'threshold' parameter of LearnSPN must be a float in the range [0.0, 1.0]. Got 3.0"),
    (["pc", "fit", "wine", "--leaf", "beta"], "'beta' is not one of 'gaussian', 'histogram'"),
])
def test_pc_fit_bad_input(cli, tmp_path, args, message):
    code, _, err = cli(*args, "--out", str(tmp_path / "m"))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_pc_query_bad_input(cli, tmp_path):
    cli("pc", "fit", "wine", "--out", str(tmp_path / "m"))
    ev = tmp_path / "ev.csv"
    ev.write_text("alcohol,target\n13.0,7\n")
    code, _, err = cli("pc", "query", str(tmp_path / "m"), "--evidence", str(ev))
    assert code == 2 and "holds '7', not one of its categories" in err
    ev.write_text("nope\n1\n")
    code, _, err = cli("pc", "query", str(tmp_path / "m"), "--evidence", str(ev))
    assert code == 2 and "unknown column" in err
    code, _, err = cli("pc", "query", str(tmp_path / "nomodel"), "--evidence", str(ev))
    assert code == 2 and "has no structure.json" in err
