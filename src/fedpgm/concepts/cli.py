"""``fedpgm concepts fit | intervene``: federated concept-based models (F-CMs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from fedpgm.cli_common import (Backend, Force, Keep, SchemaFile, Seed, Timeout, check_timeout, console, finish,
                               load, one_of, prepare_outputs, stages)
from fedpgm.errors import FedpgmError

concepts_app = typer.Typer(no_args_is_help=True, help="Federated concept-based models (F-CMs): concept sets "
                           "and graphs that grow as clients join, module-wise averaging, interventions.")


def network_of(dataset: str) -> str:
    if not dataset.startswith("bn:"):
        raise FedpgmError(f"F-CMs need a Bayesian network dataset 'bn:NAME' (e.g. bn:asia) or a table "
                          f"'csv:FILE' with --task and --client-concepts, not '{dataset}'")
    return dataset[3:]


def table_data(dataset: str, task: str, client_concepts: dict[str, list[str]], inputs: list[str] | None,
               seed: int, schema: str | None = None, keep: list[str] | None = None):
    """The concept data of a user's table ``csv:FILE`` (``fedpgm.concepts.data``); the arguments
    are what a saved model's meta keeps under ``"table"``, so ``intervene`` rebuilds the same rows."""
    from fedpgm.concepts.data import table_concept_data

    ds = load(dataset, None, seed, label=task, schema=schema, keep=keep or ())
    return table_concept_data(ds, task, client_concepts, inputs, seed)


@concepts_app.command("fit")
def fit(
    dataset: Annotated[str, typer.Argument(help="bn:NETWORK, a network pgmpy ships (asia, sachs, alarm, ...), "
                                                "or csv:FILE, a concept-annotated table (with --task, "
                                                "--client-concepts)")],
    model: Annotated[str, typer.Option(help="cbm, cem, cgm, c2bm or opaque", click_type=one_of("model"))] = "cgm",
    regime: Annotated[str, typer.Option(help="centralized, local, static, fcm or reinit",
                                        click_type=one_of("regime"))] = "fcm",
    task: Annotated[Optional[str], typer.Option(help="Task node (default: the paper's for the network; csv: the "
                                                     "task column)")] = None,
    client_concepts: Annotated[Optional[Path], typer.Option(
        help='csv: JSON manifest of the concept columns each client observes, {"client0": ["c1", "c2"], ...}; '
             "the first half of the clients starts, the rest join at --join-round")] = None,
    inputs: Annotated[Optional[str], typer.Option(help="csv: comma-separated input columns (default: every "
                                                       "column that is neither a concept nor the task)")] = None,
    schema: SchemaFile = None,
    keep: Keep = None,
    clients: Annotated[Optional[int], typer.Option(help="Clients in the end (default 20; csv: the manifest's)")] = None,
    per_round: Annotated[Optional[int], typer.Option(help="Clients sampled per round (default 10, or every "
                                                          "client when fewer)")] = None,
    join_round: Annotated[Optional[int], typer.Option(help="Round at which the late half joins "
                                                           "(default 10 for asia/sachs and csv, 20 otherwise)")] = None,
    rounds: Annotated[int, typer.Option(help="Most rounds (early stopping, patience 10)")] = 200,
    rows: Annotated[Optional[int], typer.Option(help="Rows sampled from the network (bn:)")] = None,
    perturbed_clients: Annotated[float, typer.Option(help="Fraction r of clients with perturbed graphs")] = 0.0,
    perturbed_edges: Annotated[float, typer.Option(help="Fraction p of their edges perturbed")] = 0.0,
    backend: Backend = "inprocess",
    dp_epsilon: Annotated[Optional[float], typer.Option(help="DP-SGD on client updates (Opacus): target "
                                                            "epsilon per client, delta 1e-5, clip 1.0")] = None,
    dp_scope: Annotated[str, typer.Option(help="What --dp-epsilon bounds: a client's whole 'training' "
                                               "or each 'update' it sends (the paper's setting)",
                                          click_type=one_of("dp_scope"))] = "training",
    lr: Annotated[float, typer.Option(help="Adam's learning rate for every local update (the paper tunes it "
                                           "on validation data; DP's few noisy steps favour ~1e-2)")] = 1e-3,
    secure_aggregation: Annotated[bool, typer.Option(help="Module averages by Flower's SecAgg+: the server "
                                                          "sees only sums (--backend flower)")] = False,
    timeout: Timeout = 3600.0,
    protocol: Annotated[str, typer.Option(
        help="project (graph aggregated at round 1 and the join over every joined client; centralized on that "
             "graph) or paper (the published steps: graph from each round's sampled clients, centralized on the "
             "true DAG, late clients from shifted root priors; docs/concepts.md)",
        click_type=one_of("protocol"))] = "project",
    seed: Seed = 0,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the report JSON here")] = None,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="Folder for convergence and intervention plots")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Save the model here")] = None,
    force: Force = False,
) -> None:
    """Train a concept model on DATASET under a regime and report accuracy, coverage and bytes."""
    from fedpgm.concepts.experiment import FCMSettings, paper_protocol, run_fcm
    from fedpgm.concepts.federation import RoundSettings
    from fedpgm.concepts.models import save_model
    from fedpgm.concepts.train import TrainSettings
    from dataclasses import asdict, replace

    from fedpgm.concepts.data import read_manifest
    from fedpgm.files import check_output_folder

    outputs = prepare_outputs(out, force, json=json_out)
    check_output_folder(plot, force=True, option="--plot")  # plots replace same-named PNGs only
    manifest = None
    table: dict[str, Any] = {}  # a csv: table's load arguments, kept with a saved model
    if dataset.startswith("csv:"):
        if rows is not None:
            raise FedpgmError("--rows samples a network (bn:); a csv: table uses all its rows")
        if task is None or client_concepts is None:
            raise FedpgmError(f"{dataset}: name the task column with --task and each client's concept columns "
                              "with --client-concepts FILE.json")
        manifest = read_manifest(client_concepts)
        clients = len(manifest) if clients is None else clients  # (another number is refused)
        network = dataset  # (the table's name once it is read)
    else:
        network = network_of(dataset)
        if client_concepts is not None or inputs is not None or schema is not None or keep:
            raise FedpgmError("--client-concepts, --inputs, --schema and --keep are for a csv: table; a bn: "
                              "network's clients are drawn from its graph")
    clients = 20 if clients is None else clients
    per_round = min(10, clients) if per_round is None else per_round
    join = join_round if join_round is not None else (10 if network in ("asia", "sachs") or manifest else 20)
    settings = FCMSettings(network=network, task=task, rows=rows, clients=clients, client_concepts=manifest,
                           perturbed_clients=perturbed_clients, perturbed_edges=perturbed_edges, backend=backend,
                           timeout=check_timeout(timeout),
                           rounds=RoundSettings(kind=model, regime=regime, rounds=rounds, per_round=per_round,
                                                join_round=join, seed=seed, dp_epsilon=dp_epsilon,
                                                dp_scope=dp_scope, train=TrainSettings(lr=lr),
                                                secure_aggregation=secure_aggregation))
    if protocol == "paper":
        settings = paper_protocol(settings)
    settings.check()  # (before the table is read or the network sampled)
    data = None
    if manifest is not None and task is not None:  # (a csv: table names both, checked above)
        table = {"dataset": dataset, "client_concepts": manifest, "seed": seed, "schema": schema and str(schema),
                 "keep": keep or [], "inputs": [c.strip() for c in inputs.split(",") if c.strip()] if inputs else None}
        data = table_data(task=task, **table)
        network = data.network
        settings = replace(settings, network=network)
    with stages(f"{model} {regime} on {network}", total=rounds) as update:
        fitted, report = run_fcm(settings, data, progress=lambda r, loss: update(
            completed=r, description=f"{model} {regime} on {network}: val task loss {loss:.3f}"))
    with outputs:
        if out is not None:
            save_model(fitted, out, {"network": network, "task": report["task"], "seed": seed,
                                     "rows": rows, "regime": regime, **({"table": table} if table else {})})
        finish("concepts fit", report, json_out, settings=asdict(settings))
    if plot is not None:
        write_plots(report, plot)


REGIMES = {"fcm": "F-CM", "static": "static", "reinit": "re-initialised", "centralized": "centralized",
           "local": "local"}  # the regimes' names in plot titles


def line_plot(path: Path, x, y, xlabel: str, ylabel: str, title: str, marks=(), mark_label: str = "",
              marker=None) -> None:
    """One curve; ``marks`` are x positions drawn as dashed lines named ``mark_label`` in the legend;
    the x axis is ticked at whole numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    ax.plot(x, y, marker=marker, label=None)
    for i, m in enumerate(marks):
        ax.axvline(m, color="grey", ls="--", lw=0.8, label=mark_label if i == 0 else None)
    if marks and mark_label:
        ax.legend(fontsize=8, frameon=False)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(report: dict, folder: Path) -> None:
    """Convergence (validation task loss per round, joins marked) and accuracy vs intervention depth."""
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^\w.-]", "_", f"{report['network']}_{report['model']}_{report['regime']}")  # (csv:FILE)
    regime = REGIMES.get(report["regime"], report["regime"])
    what = f"{report['model'].upper()}, {regime} regime, on {report['network']}"
    losses = report.get("val_task_loss")
    if losses:
        line_plot(folder / f"{name}_convergence.png", range(1, len(losses) + 1), losses, "round",
                  "validation task loss (cross-entropy, nats)", f"Training of {what}",
                  marks=[j["round"] for j in report.get("joins", [])], mark_label="late clients join")
    levels = report.get("intervention_accuracy")
    if levels:
        line_plot(folder / f"{name}_interventions.png", [lv["depth"] for lv in levels],
                  [lv["task_accuracy"] for lv in levels], "true concepts given: depth <= d in the true DAG",
                  "test task accuracy", f"Interventions on {what}", marker="o")


@concepts_app.command("intervene")
def intervene(
    model_dir: Annotated[Path, typer.Argument(help="A folder written by `fedpgm concepts fit --out`")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the accuracies JSON here")] = None,
) -> None:
    """Task and label accuracy on the model's test rows with true concept values given at
    increasing depths of the true DAG (the data is regenerated from the network and seed stored
    with the model, or re-read from its csv: table; there the DAG is the one learned on the
    training rows); label accuracy averages the predicted variables not intervened on."""
    from fedpgm.concepts.data import make_concept_data
    from fedpgm.concepts.experiment import test_metrics
    from fedpgm.concepts.models import load_model
    prepare_outputs(json=json_out)
    model, meta = load_model(model_dir)
    if "table" in meta:
        d = table_data(task=meta["task"], **meta["table"])
    else:
        d = make_concept_data(meta["network"], meta["task"], meta.get("rows"), int(meta.get("seed", 0)))
    result = test_metrics(model, d)
    for lv in result["intervention_accuracy"]:
        console.print(f"depth <= {lv['depth']}: task accuracy {lv['task_accuracy']:.3f}, "
                      f"label accuracy {lv['label_accuracy']:.3f}")
    finish("concepts intervene", result, json_out, dataset=meta["network"],
           settings={"model": str(model_dir), **meta}, show=False)
