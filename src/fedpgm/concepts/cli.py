"""``fedpgm concepts fit | intervene``: federated concept-based models (F-CMs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fedpgm.cli_common import (Backend, Force, Seed, Timeout, check_timeout, console, finish, one_of, prepare_outputs,
                               stages)
from fedpgm.errors import FedpgmError

concepts_app = typer.Typer(no_args_is_help=True, help="Federated concept-based models (F-CMs): concept sets "
                           "and graphs that grow as clients join, module-wise averaging, interventions.")


def network_of(dataset: str) -> str:
    if not dataset.startswith("bn:"):
        raise FedpgmError(f"F-CMs need a Bayesian network dataset 'bn:NAME' (e.g. bn:asia), not '{dataset}'")
    return dataset[3:]


@concepts_app.command("fit")
def fit(
    dataset: Annotated[str, typer.Argument(help="bn:NETWORK, a network pgmpy ships (asia, sachs, alarm, ...)")],
    model: Annotated[str, typer.Option(help="cbm, cem, cgm, c2bm or opaque", click_type=one_of("model"))] = "cgm",
    regime: Annotated[str, typer.Option(help="centralized, local, static, fcm or reinit",
                                        click_type=one_of("regime"))] = "fcm",
    task: Annotated[Optional[str], typer.Option(help="Task node (default: the paper's for the network)")] = None,
    clients: Annotated[int, typer.Option(help="Clients in the end")] = 20,
    per_round: Annotated[int, typer.Option(help="Clients sampled per round")] = 10,
    join_round: Annotated[Optional[int], typer.Option(help="Round at which the late half joins "
                                                           "(default 10 for asia/sachs, 20 otherwise)")] = None,
    rounds: Annotated[int, typer.Option(help="Most rounds (early stopping, patience 10)")] = 200,
    rows: Annotated[Optional[int], typer.Option(help="Rows sampled from the network")] = None,
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
    from dataclasses import asdict

    from fedpgm.files import check_output_folder

    network = network_of(dataset)
    join = join_round if join_round is not None else (10 if network in ("asia", "sachs") else 20)
    settings = FCMSettings(network=network, task=task, rows=rows, clients=clients,
                           perturbed_clients=perturbed_clients, perturbed_edges=perturbed_edges, backend=backend,
                           timeout=check_timeout(timeout),
                           rounds=RoundSettings(kind=model, regime=regime, rounds=rounds, per_round=per_round,
                                                join_round=join, seed=seed, dp_epsilon=dp_epsilon,
                                                dp_scope=dp_scope, train=TrainSettings(lr=lr),
                                                secure_aggregation=secure_aggregation))
    if protocol == "paper":
        settings = paper_protocol(settings)
    outputs = prepare_outputs(out, force, json=json_out)
    check_output_folder(plot, force=True, option="--plot")  # plots replace same-named PNGs only
    with stages(f"{model} {regime} on {network}", total=rounds) as update:
        fitted, report = run_fcm(settings, progress=lambda r, loss: update(
            completed=r, description=f"{model} {regime} on {network}: val task loss {loss:.3f}"))
    with outputs:
        if out is not None:
            save_model(fitted, out, {"network": network, "task": report["task"], "seed": seed,
                                     "rows": rows, "regime": regime})
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
    name = f"{report['network']}_{report['model']}_{report['regime']}"
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
    with the model); label accuracy averages the predicted variables not intervened on."""
    from fedpgm.concepts.data import make_concept_data
    from fedpgm.concepts.experiment import test_metrics
    from fedpgm.concepts.models import load_model
    prepare_outputs(json=json_out)
    model, meta = load_model(model_dir)
    d = make_concept_data(meta["network"], meta["task"], meta.get("rows"), int(meta.get("seed", 0)))
    result = test_metrics(model, d)
    for lv in result["intervention_accuracy"]:
        console.print(f"depth <= {lv['depth']}: task accuracy {lv['task_accuracy']:.3f}, "
                      f"label accuracy {lv['label_accuracy']:.3f}")
    finish("concepts intervene", result, json_out, dataset=meta["network"],
           settings={"model": str(model_dir), **meta}, show=False)
