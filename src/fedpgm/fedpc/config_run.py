"""``fedpgm run CONFIG.toml``: a federated-classification/density experiment described by a file.

A config names one dataset and a list of runs over its partitions, and optionally the baselines
to run on the same partitions; everything runs through fedpgm's runtime in-process::

    [experiment]
    dataset = "breast_cancer"   # any `fedpgm datasets` name
    seed = 0
    out = "results/cancer"      # report.json, summary.png (written together at the end)
    # rows, label, missing, test_size, data_dir: loader options (optional)

    [[runs]]
    method = "fedpc"            # fedpc (FC[PC]) or fcdt (FC[DT])
    split = "horizontal"        # horizontal, vertical, hybrid
    clients = 5
    # fedpc: clusters, glue, products, learner, params = {...}; fcdt: params = {min_samples_leaf = 20,
    #   combine = "mean", ensemble = "boosting", trees = 10} (all optional)
    # partition = {scheme = "iid"} or {label_to = "all"}, ...

    [baselines]
    hgb = true                  # HistGradientBoosting on the pooled table (a centralized reference)
    fedavg = {rounds = 50}      # FedAvg of an MLP on every horizontal run's partition
    splitnn = {epochs = 10}     # SplitNN on every vertical run's partition

Unknown sections or keys are refused before anything runs, naming the key and what is allowed.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import fields
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

from fedpgm.data import load_dataset, partition
from fedpgm.errors import FedpgmError
from fedpgm.federation import InProcessFederation
from fedpgm.files import atomic_folder
from fedpgm.fedpc.experiment import FCDT_PARAMS, FitSettings, run_fcdt, run_fedpc
from fedpgm.metrics import classification
from fedpgm.report import make_report

EXPERIMENT_KEYS = {"dataset", "seed", "out", "rows", "label", "missing", "test_size", "data_dir"}
RUN_KEYS = {"method"} | {f.name for f in fields(FitSettings)} - {"seed"}
METHODS = ("fedpc", "fcdt")
BASELINE_KEYS = {"hgb", "fedavg", "splitnn"}
BASELINE_NAMES = {"fedavg": "FedAvg MLP", "splitnn": "SplitNN MLP"}
BASELINE_OPTIONS = {"fedavg": {"rounds", "epochs", "lr", "batch_size"},
                    "splitnn": {"epochs", "lr", "batch_size", "hidden"}}
# the summary table's columns: (report section, key, header)
COLUMNS = (("metrics", "test_loglik", "test LL"), ("metrics", "accuracy", "accuracy"),
           ("metrics", "f1_macro", "macro-F1"), ("timing", "relative_runtime", "rel. time"),
           ("communication", "bytes", "bytes sent"))


WHOLE = {"seed": 0, "rows": 1, "clients": 1, "clusters": 1, "products": 1, "min_clients": 1,
         "rounds": 1, "epochs": 1, "batch_size": 1, "hidden": 1}  # key: least value
POSITIVE = ("timeout", "lr", "test_size")  # numbers > 0
MAX_SEED = 2**32 - 1


def check_keys(table: dict, allowed: set[str], where: str) -> None:
    """Only ``allowed`` keys, and every number-valued key a number in its range."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise FedpgmError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    for k, v in table.items():
        if k in WHOLE and (isinstance(v, bool) or not isinstance(v, int) or v < WHOLE[k]):
            raise FedpgmError(f"{where}: {k} must be a whole number >= {WHOLE[k]}, got {v!r}")
        if k in POSITIVE and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise FedpgmError(f"{where}: {k} must be a number > 0, got {v!r}")
    if "seed" in table and table["seed"] > MAX_SEED:
        raise FedpgmError(f"{where}: seed must be at most {MAX_SEED}, got {table['seed']}")


def read_config(path: str | Path) -> dict:
    """The parsed and checked config (see the module doc)."""
    path = Path(path)
    try:
        config = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FedpgmError(f"no config file {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise FedpgmError(f"{path} is not valid TOML: {e}") from None
    check_keys(config, {"experiment", "runs", "baselines"}, str(path))
    exp = config.get("experiment")
    if not isinstance(exp, dict) or "dataset" not in exp:
        raise FedpgmError(f"{path}: an [experiment] section with a dataset is required")
    check_keys(exp, EXPERIMENT_KEYS, f"{path} [experiment]")
    runs = config.get("runs", [])
    if not runs:
        raise FedpgmError(f"{path}: add at least one [[runs]] entry (method, split, clients)")
    for i, run in enumerate(runs):
        where = f"{path} [[runs]] #{i + 1}"
        check_keys(run, RUN_KEYS, where)
        if run.get("method", "fedpc") not in METHODS:
            raise FedpgmError(f"{where}: unknown method '{run['method']}'; use one of {list(METHODS)}")
        if "split" not in run or "clients" not in run:
            raise FedpgmError(f"{where}: needs split and clients")
        if run.get("method") == "fcdt":
            check_keys(run.get("params", {}), set(FCDT_PARAMS), f"{where} params")
    baselines = config.get("baselines", {})
    check_keys(baselines, BASELINE_KEYS, f"{path} [baselines]")
    for name, allowed in BASELINE_OPTIONS.items():
        if isinstance(baselines.get(name), dict):
            check_keys(baselines[name], allowed, f"{path} [baselines] {name}")
        elif name in baselines and not isinstance(baselines[name], bool):
            raise FedpgmError(f"{path} [baselines] {name}: give true or a table of options "
                              f"({sorted(allowed)}), not {baselines[name]!r}")
    return config


def run_name(run: dict) -> str:
    method = {"fedpc": "FC[PC]", "fcdt": "FC[DT]"}[run.get("method", "fedpc")]
    return f"{method} {run['split']} x{run['clients']}"


def run_experiment(config: dict, progress=None) -> dict:
    """Every run and baseline of a checked ``config``; returns the report (``fedpgm.report``'s
    schema, each run's values under ``by_run`` in its sections; nothing written)."""
    exp = config["experiment"]
    seed = int(exp.get("seed", 0))
    options = {k: exp[k] for k in ("rows", "label", "missing", "test_size", "data_dir") if k in exp}
    ds = load_dataset(exp["dataset"], seed=seed, **options)
    label = ds.schema.label
    truth = ds.test[label].to_numpy(float) if label else None
    baselines = config.get("baselines", {})
    results: dict[str, dict] = {}
    steps = list(config["runs"])
    for run in steps:
        name = run_name(run)
        if progress:
            progress(f"{name}")
        settings = FitSettings(seed=seed, **{k: v for k, v in run.items() if k != "method"})
        _, report = (run_fcdt(ds, settings) if run.get("method") == "fcdt" else run_fedpc(ds, settings))
        report["bytes"] = report["bytes_up"] + report["bytes_down"]
        results[name] = report
        for kind, split in (("fedavg", "horizontal"), ("splitnn", "vertical")):
            if run["split"] == split and kind in baselines and label:
                results[f"{BASELINE_NAMES[kind]} {split} x{run['clients']}"] = baseline_run(
                    kind, ds, run, settings.partition, seed, baselines[kind], truth, progress)
    if baselines.get("hgb") and label:
        if progress:
            progress("centralized HGB")
        results["centralized HGB"] = hgb(ds, truth)
    return make_report("run", {"n_train": len(ds.train), "n_test": len(ds.test)}, dataset=ds.name,
                       settings=config, runs=results)


def run_values(report: dict) -> dict[str, dict]:
    """run name -> {key: value} for the summary table's ``COLUMNS`` (None where a run has none)."""
    names = {name: None for section in ("metrics", "communication", "timing", "details")
             for name in report[section].get("by_run", {})}
    return {name: {key: report[section].get("by_run", {}).get(name, {}).get(key) for section, key, _ in COLUMNS}
            for name in names}


def baseline_run(kind: str, ds, run: dict, part_options: dict, seed: int, settings: dict | bool,
                 truth, progress) -> dict:
    """FedAvg (``kind="fedavg"``, horizontal) or SplitNN (``"splitnn"``, vertical) of an MLP on the
    run's partition; ``settings`` is ``true`` (defaults) or a table of options (checked by
    ``read_config``). Returns its classification metrics and bytes."""
    from fedpgm.baselines.fedavg import fedavg, predict_proba
    from fedpgm.baselines.splitnn import opt_in, splitnn

    split = "horizontal" if kind == "fedavg" else "vertical"
    if progress:
        progress(f"{BASELINE_NAMES[kind]} {split} x{run['clients']}")
    kw = dict(settings) if isinstance(settings, dict) else {}
    part = partition(ds, split, run["clients"], seed, **part_options)
    part = part if kind == "fedavg" else opt_in(part)  # (one operator runs every party: a baseline)
    with InProcessFederation(part, f"fedpgm.baselines.{kind}:HANDLERS") as fed:
        res = (fedavg if kind == "fedavg" else splitnn)(fed, seed=seed, **kw)
    proba, truth = ((predict_proba(res, ds.test), truth) if kind == "fedavg"
                    else (res["test_proba"], res["test_labels"].astype(float)))
    comm = res["communication"]
    return classification(proba, truth) | {"bytes": comm["bytes_up"] + comm["bytes_down"]}


def hgb(ds, truth) -> dict:
    """HistGradientBoosting on the pooled train split: the centralized reference's metrics."""
    label = ds.schema.label
    X = ds.train.drop(columns=[label])
    cats = [ds.schema[c].discrete for c in X.columns]
    model = HistGradientBoostingClassifier(categorical_features=cats, random_state=0).fit(X, ds.train[label])
    return classification(model.predict_proba(ds.test.drop(columns=[label])), truth)


def write_outputs(report: dict, out: str | Path) -> None:
    """``report.json`` and ``summary.png`` (accuracy and bytes per run), replacing ``out`` at once."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.patches import Patch

    values = run_values(report)
    names = list(values)[::-1]  # barh draws bottom-up: the first run on top, in both panels
    colours = ["tab:blue" if n.startswith("FC") else "tab:orange" for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.4 * len(names) + 1.8), sharey=True)
    accuracy = np.array([values[n]["accuracy"] if values[n]["accuracy"] is not None else np.nan for n in names])
    axes[0].barh(names, accuracy, color=colours)
    low = np.nanmin(accuracy) if np.isfinite(accuracy).any() else 0.0
    axes[0].set_xlim(max(0.0, np.floor((low - 0.05) * 20) / 20), 1.0)  # zoomed: 0.91 and 0.96 apart
    axes[0].set_xlabel("test accuracy")
    sent = [values[n]["bytes"] or np.nan for n in names]
    axes[1].barh(names, sent, color=colours)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("bytes sent, up + down (log scale)")
    axes[1].legend(handles=[Patch(color="tab:blue", label="fedpgm FedPC (FC[PC], FC[DT])"),
                            Patch(color="tab:orange", label="baselines")], loc="lower right", fontsize=8)
    fig.suptitle(f"Federated runs and baselines on {report['dataset']}: accuracy and communication")
    fig.tight_layout()
    with atomic_folder(out) as tmp:
        (tmp / "report.json").write_text(json.dumps(report, indent=1, default=float) + "\n")
        fig.savefig(tmp / "summary.png", dpi=110)
    plt.close(fig)
