import json
import os
import json
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest


def test_datasets_lists_every_loader(cli):
    code, out, _ = cli("datasets")
    assert code == 0
    for name in ("breast_cancer", "digits", "wine", "adult", "credit", "debd:", "csv:", "bn:asia",
                 "bn:alarm", "synthetic:gmm", "synthetic:mixed"):
        assert name in out
    assert "569" in out  # breast cancer rows


def test_partition_writes_manifest_and_csvs(cli, tmp_path):
    out_dir = tmp_path / "wine"
    code, out, err = cli("partition", "wine", "--split", "horizontal", "--clients", "3",
                         "--scheme", "dirichlet", "--alpha", "1.0", "--seed", "2", "--out", str(out_dir))
    assert code == 0, err
    man = json.loads((out_dir / "manifest.json").read_text())
    assert man["params"] == {"seed": 2, "scheme": "dirichlet", "alpha": 1.0}
    assert sum(c["n_train"] for c in man["clients"]) == 142
    assert sorted(p.name for p in out_dir.glob("*.csv")) == [
        "client-0.csv", "client-0.test.csv", "client-1.csv", "client-1.test.csv", "client-2.csv",
        "client-2.test.csv"]


def test_schema_command_infers_and_writes(cli, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("age,smoker,y\n30,yes,0\n41,no,1\n52,no,1\n")
    code, out, _ = cli("schema", f"csv:{csv}", "--label", "y", "--out", str(tmp_path / "s.json"))
    assert code == 0 and "smoker" in out and "binary" in out
    assert json.loads((tmp_path / "s.json").read_text())["label"] == "y"


@pytest.fixture
def bad_csvs(tmp_path):
    files = {
        "dupe.csv": "a,b,a\n1,2,3\n4,5,6\n",
        "nanlabel.csv": "x,y\n1,\n2,\n3,\n4,\n",  # (rows without a label are left out; none has one)
        "binary.csv": None,
    }
    for name, text in files.items():
        if text is None:
            (tmp_path / name).write_bytes(b"\x00\xff\xfe\x00\x01garbage")
        else:
            (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["partition", "nosuch", "--split", "vertical", "--clients", "2"], "unknown dataset 'nosuch'"),
    (["partition", "csv:{d}/missing.csv", "--split", "vertical", "--clients", "2"], "does not exist"),
    (["partition", "csv:{d}/binary.csv", "--split", "vertical", "--clients", "2"], "cannot read"),
    (["partition", "csv:{d}/dupe.csv", "--split", "vertical", "--clients", "2"], "repeats column name"),
    (["partition", "csv:{d}/nanlabel.csv", "--label", "y", "--split", "horizontal", "--clients", "2"],
     "column 'y' has no values; drop it"),
    (["partition", "wine", "--split", "vertical", "--clients", "2", "--groups", "alcohol;zzz"],
     "unknown column"),
    (["partition", "wine", "--split", "horizontal", "--clients", "500"], "cannot be split across 500"),
    (["partition", "wine", "--split", "vertical", "--clients", "14"], "13 feature columns"),
    (["partition", "wine", "--split", "horizontal", "--clients", "0"], "at least 1"),
    (["partition", "wine", "--split", "horizontal", "--clients", "2", "--scheme", "dirichlet",
      "--alpha", "0"], "alpha must be > 0"),
    (["partition", "adult", "--data-dir", "{d}", "--split", "vertical", "--clients", "2"],
     "needs the file"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(cli, bad_csvs, args, message):
    out_dir = bad_csvs / "out"
    args = [a.format(d=bad_csvs) for a in args] + ["--out", str(out_dir)]
    code, _, err = cli(*args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not out_dir.exists()
    assert not [p for p in bad_csvs.iterdir() if "partial" in p.name]


def test_console_script_exit_code(tmp_path):
    exe = shutil.which("fedpgm", path=os.path.dirname(sys.executable))
    assert exe, "the fedpgm console script is installed beside the interpreter"
    res = subprocess.run([exe, "partition", "wine", "--split", "vertical", "--clients", "99",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: 13 feature columns cannot be split")
    res = subprocess.run([exe, "partition", "wine", "--split", "vertical"], capture_output=True, text=True)
    assert res.returncode == 2  # typer's own usage error: missing --clients


def test_demo_runs(cli):
    code, out, _ = cli("demo")
    assert code == 0
    rows = {}
    for line in out.splitlines():
        words = line.split()
        if words[:1] in (["horizontal"], ["vertical"], ["hybrid"]):
            gluing = words[2] if words[2] == "-" else " ".join(words[2:4])
            rows[f"{words[0]} {words[1]} {gluing}"] = [float(w) for w in words[4 if gluing != "-" else 3:]]
    assert sorted(rows) == ["horizontal x5 -", "hybrid x2 aligned 8", "hybrid x2 random 2",
                            "vertical x2 aligned 8", "vertical x2 random 2"]
    for cells in rows.values():  # LL cent., LL fed., accuracy, rel. time, kB sent
        assert len(cells) == 5 and cells[0] > cells[1]  # the centralized circuit is the better density
        assert 0.85 < cells[2] <= 1.0 and cells[3] > 0 and cells[4] > 0  # no timing targets in tests


@pytest.mark.parametrize("args", [
    ["fedpc", "fit", "wine", "--split", "horizontal", "--clients", "2", "--timeout", "0"],
    ["fedpc", "fit", "wine", "--split", "horizontal", "--clients", "2", "--min-clients", "3"],
    ["ngm", "fit", "wine", "--clients", "2", "--target", "alcohol", "--timeout", "-5"],
    ["concepts", "fit", "bn:asia", "--timeout", "0"],
])
def test_bad_deadlines_and_quorums_are_refused_before_any_work(cli, tmp_path, args):
    code, _, err = cli(*args, "--json", tmp_path / "r.json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--timeout must be > 0 seconds" in err or "--min-clients must lie in 1..2" in err
    assert not (tmp_path / "r.json").exists()


def test_out_never_deletes_a_users_folder_and_bad_outputs_fail_before_work(cli, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    afile = tmp_path / "afile.txt"
    afile.write_text("keep")
    commands = [("pc", "fit", "wine"),
                ("fedpc", "fit", "wine", "--split", "vertical", "--clients", "2"),
                ("ngm", "fit", "wine", "--target", "alcohol"),
                ("concepts", "fit", "bn:asia", "--clients", "2", "--per-round", "2"),
                ("run", "examples/cancer.toml"),
                ("partition", "wine", "--split", "horizontal", "--clients", "2")]
    for args in commands:
        code, _, err = cli(*args, "--out", mine)
        assert code == 2 and "already exists and is not empty; choose a new folder or pass --force" in err, (args, err)
        code, _, err = cli(*args, "--out", afile)
        assert code == 2 and "is a file" in err, (args, err)
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"] and afile.read_text() == "keep"
    for args in commands[:4]:  # an unwritable --json fails before the fit, not after it
        code, _, err = cli(*args, "--json", afile / "r.json")
        assert code == 2 and "--json" in err and "cannot write in" in err, (args, err)
        code, _, err = cli(*args, "--json", mine)
        assert code == 2 and "is a folder; name a file" in err, (args, err)
    code, _, err = cli("pc", "fit", "wine", "--min-instances", "40", "--out", mine, "--force",
                       "--json", tmp_path / "r.json")
    assert code == 0, err
    assert re.search(r"^\[ +\d+\.\d s\] learning a learnspn circuit on wine", err, re.M), err  # no terminal: lines
    assert sorted(p.name for p in mine.iterdir()) == ["params.safetensors", "structure.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    from fedpgm.circuits.learners import load_model
    from fedpgm.data import load_dataset

    metrics = json.loads((tmp_path / "r.json").read_text())["metrics"]  # given a label: its accuracy, macro-F1
    test = load_dataset("wine", seed=0).test
    truth = test["target"].to_numpy(dtype=int)
    assert metrics["accuracy"] == pytest.approx((load_model(mine).predict_proba(test).argmax(1) == truth).mean())
    assert 0 < metrics["f1_macro"] <= 1 and "f1" not in metrics  # (F1 of one class: binary labels only)


def test_help_and_version_start_without_the_heavy_libraries():
    code = ("import sys\nfrom fedpgm.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', sorted(m for m in ('torch', 'numpy', 'pandas', 'sklearn', 'flwr') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "LOADED []" in out and "Usage: fedpgm" in out
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "fedpgm.cli", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"fedpgm {version('fedpgm')}"


def test_progress_without_a_terminal_prints_one_line_per_update(capsys):
    from fedpgm.cli_common import stages

    with stages("F-CM on asia", total=4) as update:
        time.sleep(0.2)
        update(description="F-CM on asia: val task loss 0.700", completed=1)
        time.sleep(0.2)
        update(completed=2)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"\[ +\d+\.\d s\] F-CM on asia", lines[0])
    first = re.fullmatch(r"\[ +(\S+) s\] F-CM on asia: val task loss 0.700 \(1/4; at most (\d+) s left at this pace\)",
                         lines[1])
    assert first and float(first[1]) >= 0.2 and abs(int(first[2]) - 3 * float(first[1])) <= 1  # 3 more at its pace
    assert re.fullmatch(r".* \(2/4; at most \d+ s left at this pace\)", lines[2])


def test_enumerated_options_list_their_values_and_refuse_others(cli):
    from fedpgm.cli_common import CHOICES
    from fedpgm.circuits.learnspn import CONTINUOUS_LEAVES, LEAF_MODELS
    from fedpgm.circuits.dense_estimator import DEVICES
    from fedpgm.circuits.dense_inputs import INPUTS
    from fedpgm.circuits.dense_train import METHODS
    from fedpgm.circuits.region_graph import STRUCTURES
    from fedpgm.circuits.selection import SELECTIONS
    from fedpgm.circuits.dense import SELECTIONS as HOW
    from fedpgm.data.images import HIDE, IMAGE_SPLITS
    from fedpgm.concepts.experiment import PROTOCOLS
    from fedpgm.concepts.federation import REGIMES
    from fedpgm.concepts.models import KINDS
    from fedpgm.concepts.privacy import DP_SCOPES
    from fedpgm.data.dataset import MISSING_POLICIES
    from fedpgm.data.partition import HORIZONTAL_SCHEMES, SPLITS
    from fedpgm.federation.apps import BACKENDS
    from fedpgm.federation.psi import ALIGNMENTS
    from fedpgm.fedpc.defaults import CLUSTER_FITS
    from fedpgm.fedpc.plan import GLUES
    from fedpgm.fedpc.server import PLACEMENTS
    from fedpgm.fedpc.experts import ENSEMBLES
    from fedpgm.fedpc.trees import COMBINES
    from fedpgm.ngm.graph import GRAPH_METHODS
    from fedpgm.ngm.model import MODES

    assert CHOICES == {"split": SPLITS, "scheme": HORIZONTAL_SCHEMES, "backend": BACKENDS, "glue": ("auto", *GLUES),
                       "placement": PLACEMENTS, "align": ALIGNMENTS, "tree_root": COMBINES, "ensemble": ENSEMBLES,
                       "leaf": CONTINUOUS_LEAVES, "leaf_model": LEAF_MODELS, "missing": MISSING_POLICIES, "graph": GRAPH_METHODS,
                       "ngm_mode": MODES, "model": KINDS, "regime": REGIMES, "dp_scope": DP_SCOPES,
                       "protocol": PROTOCOLS, "select": SELECTIONS, "structure": STRUCTURES, "inputs": INPUTS,
                       "train": METHODS, "device": DEVICES, "regions": IMAGE_SPLITS,
                       "hide": HIDE, "how": HOW, "cluster_fit": CLUSTER_FITS}
    from typer.main import get_command

    from fedpgm.cli import app

    fit = get_command(app).commands["fedpc"].commands["fit"]  # what --help shows: [horizontal|vertical|hybrid]
    params = {p.name: p for p in fit.params}
    assert list(params["split"].type.choices) == list(SPLITS)
    assert list(params["backend"].type.choices) == list(BACKENDS)
    code, _, err = cli("fedpc", "fit", "wine", "--split", "diagonal", "--clients", "2")
    assert code == 2 and "'diagonal' is not one of 'horizontal', 'vertical', 'hybrid'" in err
    code, _, err = cli("concepts", "fit", "bn:asia", "--model", "xyz")  # refused before any work
    assert code == 2 and "'xyz' is not one of 'cbm', 'cem', 'cgm', 'c2bm', 'opaque'" in err


def test_federation_moments_writes_the_report_schema(cli, tmp_path, read_report):
    from fedpgm.data import load_dataset

    assert cli("partition", "wine", "--split", "horizontal", "--clients", "3", "--out", tmp_path / "p")[0] == 0
    code, out, err = cli("federation", "moments", tmp_path / "p", "--json", tmp_path / "m.json")
    assert code == 0, err
    report = read_report(tmp_path / "m.json", "federation moments")
    pooled = load_dataset("wine", seed=0).train
    m = report["metrics"]
    assert m["n"] == len(pooled) and report["settings"]["backend"] == "inprocess"
    columns = report["details"]["columns"]
    np.testing.assert_allclose(m["mean"], pooled[columns].mean().to_numpy(), rtol=1e-10)
    assert report["communication"]["messages"] == 12 and report["communication"]["bytes_up"] > 0
