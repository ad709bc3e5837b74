import numpy as np

import pytest


def test_pc_fit_report_save_and_query(cli, tmp_path, read_report):
    code, out, err = cli("pc", "fit", "synthetic:mixed", "--rows", "1500", "--out",
                         str(tmp_path / "m"), "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    report = read_report(tmp_path / "r.json", "pc fit")
    m = report["metrics"]
    assert report["dataset"] == "synthetic:mixed" and report["settings"]["learner"] == "learnspn"
    assert report["settings"]["params"]["min_instances_slice"] == 100
    assert {"n_nodes", "n_edges", "n_params", "train_loglik"} <= set(m)
    assert m["n_train"] == 1200 and m["n_features"] == 9 and m["test_loglik"] < 0
    assert 0 < report["timing"]["train_seconds"] and 0 < report["timing"]["critical_path_seconds"]
    assert f"{m['test_loglik']:.4f}" in out  # the one table shows the metrics
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
    (["pc", "fit", "wine", "--alpha", "0"], "The 'alpha' parameter of LearnSPN must be a float in the range (0.0, inf)"),
    (["pc", "fit", "wine", "--row-clusters", "1"], "The 'row_clusters' parameter of LearnSPN must be an int in the range"),
    (["pc", "fit", "wine", "--em-iterations", "-1"], "-1 is not in the range x>=0"),
    (["pc", "fit", "wine", "--latent-states", "0"], "0 is not in the range x>=1"),
    (["pc", "fit", "wine", "--em-batch-size", "0"], "0 is not in the range x>=1"),
])
def test_pc_fit_bad_input(cli, tmp_path, args, message):
    code, _, err = cli(*args, "--out", str(tmp_path / "m"))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_pc_fit_latent_tree_leaves_trained_by_stepwise_em(cli, tmp_path, read_report):
    code, _, err = cli("pc", "fit", "synthetic:mixed", "--rows", "1500", "--leaf-model", "latent-tree",
                       "--latent-states", "3", "--em-iterations", "2", "--em-batch-size", "200",
                       "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    params = read_report(tmp_path / "r.json", "pc fit")["settings"]["params"]
    assert (params["leaf_model"], params["latent_states"], params["em_batch_size"]) == ("latent-tree", 3, 200)


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


def test_pc_fit_dense_on_images_sample_and_inpaint(cli, tmp_path, read_report):
    code, out, err = cli("pc", "fit", "digits", "--learner", "pd", "--pieces", "4", "--units", "4", "--epochs", "2",
                         "--inputs", "categorical", "--out", str(tmp_path / "m"), "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    report = read_report(tmp_path / "r.json", "pc fit")
    m = report["metrics"]
    assert {"train_seconds", "critical_path_seconds"} <= set(report["timing"]) and m["n_params"] > 0
    assert m["n_features"] == 64 and report["details"]["device"] == "cpu"  # the label is left out
    assert abs(m["test_bpd"] + m["test_loglik"] / (64 * np.log(2))) < 1e-12
    assert f"{m['test_bpd']:.4f}" in out and "epoch 2:" in err
    code, out, err = cli("pc", "sample", str(tmp_path / "m"), "-n", "9", "--png", str(tmp_path / "s.png"),
                         "--csv", str(tmp_path / "s.csv"))
    assert code == 0, err
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    samples = np.loadtxt(tmp_path / "s.csv", delimiter=",", skiprows=1)
    assert samples.shape == (9, 64) and np.isin(samples, np.arange(17)).all()
    code, out, err = cli("pc", "inpaint", str(tmp_path / "m"), "digits", "-n", "4", "--hide", "right",
                         "--png", str(tmp_path / "i.png"))
    assert code == 0 and "mean absolute error on the hidden pixels" in " ".join(out.split()), err
    import matplotlib.image
    grid = matplotlib.image.imread(tmp_path / "i.png")
    assert grid.shape[:2] == (4 * (3 * 9 + 1), 4 * (4 * 9 + 1))  # 3 rows of 4 images of 8 x 8, zoomed 4x


@pytest.mark.parametrize("args, message", [
    (["pc", "fit", "wine", "--learner", "pd"], "needs an image"),
    (["pc", "fit", "digits", "--learner", "pd", "--device", "cuda"], "torch sees no GPU"),
    (["pc", "fit", "digits", "--learner", "pd", "--structure", "spiral"], "'spiral' is not one of"),
    (["pc", "fit", "digits", "--learner", "pd", "--units", "0"], "0 is not in the range x>=1"),
    (["pc", "fit", "mnist:/nonexistent/folder", "--learner", "pd"], "MNIST folder /nonexistent/folder does not exist"),
])
def test_pc_fit_dense_bad_input(cli, tmp_path, args, message):
    import torch
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = cli(*args, "--out", str(tmp_path / "m"), "--json", str(tmp_path / "r.json"))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m").exists() and not (tmp_path / "r.json").exists()


def test_pc_inpaint_refuses_other_images(cli, tmp_path, write_mnist):
    write_mnist(tmp_path / "mn", shape=(8, 8))
    (tmp_path / "mn" / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b" + b"broken")
    code, _, err = cli("pc", "fit", f"mnist:{tmp_path / 'mn'}", "--learner", "pd", "--out", str(tmp_path / "x"))
    assert code == 2 and "cannot read" in err and not (tmp_path / "x").exists()
    write_mnist(tmp_path / "mn", shape=(6, 6))
    code, _, err = cli("pc", "fit", f"mnist:{tmp_path / 'mn'}", "--learner", "pd", "--pieces", "2", "--epochs", "1",
                       "--out", str(tmp_path / "m"))
    assert code == 0, err
    code, _, err = cli("pc", "inpaint", str(tmp_path / "m"), "digits", "--png", str(tmp_path / "i.png"))
    assert code == 2 and "pixels differ from the model's" in err and not (tmp_path / "i.png").exists()
