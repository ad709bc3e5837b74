"""``fedpgm ngm fit | query | sample | stitch``: federated neural graphical models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from fedpgm.cli_common import (Backend, DataDir, Force, Keep, Label, Missing, SchemaFile, Seed, Timeout, check_timeout,
                               console, finish, prepare_outputs, one_of, stages, write_table)
from fedpgm.errors import FedpgmError
from fedpgm.ngm.defaults import SAMPLES_FACTOR, SOFT_TARGETS

ngm_app = typer.Typer(no_args_is_help=True, help="Federated neural graphical models (FedNGM): merged "
                      "graphs, a global NGM distilled from client samples, per-client stitching.")
JsonOut = Annotated[Optional[Path], typer.Option("--json", help="Write the report JSON here")]
ModelDir = Annotated[Path, typer.Argument(help="An NGM folder (model.json + weights.safetensors)")]


@ngm_app.command("fit")
def fit(
    dataset: str,
    clients: Annotated[int, typer.Option(help="Number of clients K")] = 3,
    skew: Annotated[Optional[list[str]], typer.Option(help="One per client: COLUMN, COLUMN=CATEGORY, "
                                                           "COLUMN!=CATEGORY or COLUMN>=NUMBER")] = None,
    withhold: Annotated[Optional[list[str]], typer.Option(help="One feature per client, held only by it "
                                                               "(stitching adds it back)")] = None,
    target: Annotated[Optional[list[str]], typer.Option(help="Targets to evaluate (all other features "
                                                             "observed; default: the --label)")] = None,
    public_fraction: Annotated[float, typer.Option(help="Share of rows made public (half of them "
                                                        "public-train, half public-test)")] = 0.5,
    graph: Annotated[str, typer.Option(help="glasso, bn (pgmpy, moralised) or ngr (revealed)",
                                       click_type=one_of("graph"))] = "glasso",
    sparsity: Annotated[float, typer.Option(help="Fraction of feature pairs kept as edges")] = 0.25,
    min_clients: Annotated[int, typer.Option(help="Release threshold T: clients that must contribute")] = 1,
    samples_factor: Annotated[float, typer.Option(help="Synthetic rows per client training row")] = SAMPLES_FACTOR,
    gibbs_sweeps: Annotated[int, typer.Option(help="Gibbs sweeps refining each sample")] = 0,
    soft: Annotated[bool, typer.Option("--soft/--hard", help="Global NGM fits, on each sample, the "
                                       "predictions of the client model that drew it (soft) or the "
                                       "sampled values (hard)")] = SOFT_TARGETS,
    epochs: Annotated[int, typer.Option(help="Most training epochs per NGM (early stopping)")] = 200,
    hidden: Annotated[int, typer.Option(help="Hidden units per layer")] = 64,
    lam: Annotated[float, typer.Option(help="Weight of the graph penalty")] = 0.1,
    backend: Backend = "inprocess",
    timeout: Timeout = 3600.0,
    seed: Seed = 0,
    data_dir: DataDir = None,
    label: Label = None,
    schema: SchemaFile = None,
    missing: Missing = None,
    keep: Keep = None,
    json_out: JsonOut = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Folder for the graph plots (PNG)")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Save the global NGM here")] = None,
    force: Force = False,
) -> None:
    """Run FedNGM on DATASET (e.g. adult, or csv:FILE --label COLUMN): client graphs and NGMs, merged
    graph, global NGM from samples, stitching where a feature is withheld; every model on every
    client's test set and on public-test."""
    from dataclasses import asdict

    from fedpgm.files import check_output_folder
    from fedpgm.ngm.experiment import ADULT_DEFAULTS, ExperimentSettings, run_ngm
    from fedpgm.ngm.model import NGMSettings

    defaults = ADULT_DEFAULTS if dataset == "adult" else {"skew": [], "withhold": [],
                                                          "targets": [label] if label else []}
    settings = ExperimentSettings(
        dataset=dataset, clients=clients, skew=skew if skew is not None else defaults["skew"][:clients],
        withhold=withhold if withhold is not None else defaults["withhold"][:clients],
        targets=target if target is not None else defaults["targets"], public_fraction=public_fraction,
        graph=graph, sparsity=sparsity, min_clients=min_clients, samples_factor=samples_factor,
        gibbs_sweeps=gibbs_sweeps, soft_targets=soft,
        ngm=NGMSettings(epochs=epochs, hidden=hidden, lam=lam, seed=seed,
                        revealer=graph == "ngr", sparsity=sparsity),
        seed=seed, data_dir=str(data_dir) if data_dir else None, label=label,
        schema=str(schema) if schema else None, missing=missing, keep=keep or [], timeout=check_timeout(timeout),
        backend=backend)
    if not settings.targets:
        raise FedpgmError(f"name at least one --target (or a --label) for {dataset}")
    outputs = prepare_outputs(out, force, json=json_out)
    check_output_folder(plot, force=True, option="--plot")  # plots replace same-named PNGs only
    with outputs, stages(f"FedNGM on {dataset}, {clients} clients ({backend})") as update:
        model, report = run_ngm(settings, out, plot, progress=lambda text: update(description=f"FedNGM: {text}"))
        finish("ngm fit", report, json_out, settings=asdict(settings), show=False)
    if not report["released"]:
        console.print(f"[yellow]refused:[/] {report['refusal']}")
        return
    print_report(report)
    if out is not None:
        console.print(f"global NGM saved to {out}")


def print_report(report: dict) -> None:
    """Two tables that fit a terminal: every model on public-test; each client's own model
    against the global one on that client's test set (the primary metric per target)."""
    from rich.table import Table

    metrics = report["metrics"]
    targets = list(metrics["global"]["public-test"])
    head = [f"{y} {metrics['global']['public-test'][y]['primary']}" for y in targets]

    def value(model: str, test_set: str, y: str) -> str:
        m = metrics[model][test_set][y]
        return f"{m[m['primary']]:.3f}"

    table = Table(title=f"FedNGM on {report['dataset']} (seed {report['seed']}): public-test")
    table.add_column("model")
    for h in head:
        table.add_column(h, justify="right")
    for model in metrics:
        table.add_row(model, *[value(model, "public-test", y) for y in targets])
    console.print(table, width=min(console.width, 80))
    own = Table(title="each client's test set: own NGM / global NGM")
    own.add_column("client")
    for h in head:
        own.add_column(h, justify="right")
    for c in report["clients"]:
        own.add_row(c, *[f"{value(c, c, y)} / {value('global', c, y)}" for y in targets])
    console.print(own, width=min(console.width, 80))
    c = report["comparisons"]
    console.print("global beats mean client on public-test: " + ", ".join(
        f"{y} {'yes' if v['holds'] else 'no'}" for y, v in c["global_beats_mean_client_on_public"].items()))
    if c["stitching_improves"]:
        console.print("stitching improves: " + "; ".join(
            f"{client} " + ", ".join(f"{y} {'yes' if v['holds'] else 'no'}" for y, v in by.items())
            for client, by in c["stitching_improves"].items()))
    else:
        console.print("no stitching: no client holds a withheld feature (--withhold FEATURE, one per client)")
    console.print(f"bytes up {report['bytes_up']:,}, down {report['bytes_down']:,}; "
                  f"wall {report['wall_seconds']['total']:.1f} s")


def read_evidence(model, path: Path):
    """An evidence CSV (category names or codes) encoded with the model's schema."""
    from fedpgm.data.loaders import read_csv_file

    raw = read_csv_file(path)
    unknown = [c for c in raw.columns if c not in model.schema]
    if unknown:
        raise FedpgmError(f"{path}: column(s) {unknown} are not in the model; it knows {model.names}")
    sub = model.schema.select(raw.columns)
    for f in sub.features:
        if f.kind == "continuous":
            bad = raw[f.name].dropna().map(lambda v: not _is_number(v))
            if bad.any():
                raise FedpgmError(f"{path}: column '{f.name}' is numeric but holds "
                                  f"{raw[f.name].dropna()[bad].iloc[0]!r}; give numbers")
    return sub.encode(raw, str(path))


def _is_number(v) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


@ngm_app.command("query")
def query(
    model_dir: ModelDir,
    target: Annotated[str, typer.Option(help="The feature to predict")],
    evidence: Annotated[Path, typer.Option(help="CSV of observed values (blank = unknown)")],
    mode: Annotated[str, typer.Option(help="direct (one pass) or iterative (refine unknown inputs)",
                                      click_type=one_of("ngm_mode"))] = "direct",
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the answers CSV here")] = None,
) -> None:
    """Predict TARGET for each evidence row: its expected value or its class probabilities."""
    import pandas as pd

    from fedpgm.ngm.model import NGM

    model = NGM.load(model_dir)
    if target not in model.schema:
        raise FedpgmError(f"target '{target}' is not in the model; it knows {model.names}")
    frame = read_evidence(model, evidence)
    pred = model.predict(frame, target, mode=mode)
    f = model.schema[target]
    if pred.ndim == 1:
        answer = pd.DataFrame({f"E[{target}]": pred}, index=frame.index)
    else:
        answer = pd.DataFrame(pred, index=frame.index, columns=[f"p({target}={c})" for c in f.states])
    write_table(answer, out)


@ngm_app.command("sample")
def sample(
    model_dir: ModelDir,
    n: Annotated[int, typer.Option("-n", help="Number of rows")],
    gibbs_sweeps: Annotated[int, typer.Option(help="Gibbs sweeps refining each sample")] = 0,
    seed: Seed = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the samples CSV here")] = None,
) -> None:
    """Draw N rows from the model (breadth-first over its graph), category names decoded."""
    from fedpgm.ngm.model import NGM

    model = NGM.load(model_dir)
    write_table(model.schema.decode(model.sample(n, seed, gibbs_sweeps)), out, index=False)


@ngm_app.command("stitch")
def stitch(
    model_dir: ModelDir,
    data: Annotated[Path, typer.Option(help="The client's CSV: the model's features plus its extra ones")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the stitched NGM")],
    sparsity: Annotated[float, typer.Option(help="Client graph: fraction of pairs kept")] = 0.25,
    epochs: Annotated[Optional[int], typer.Option(help="Most training epochs")] = None,
    force: Force = False,
) -> None:
    """Widen a global NGM for a client's extra features and train only the new blocks on its rows."""
    from dataclasses import asdict

    from fedpgm.data.loaders import read_csv_file
    from fedpgm.data.schema import Schema, infer_schema
    from fedpgm.ngm.graph import glasso_graph
    from fedpgm.ngm.model import NGM, NGMSettings
    from fedpgm.ngm.stitch import stitch as stitch_model

    outputs = prepare_outputs(out, force)
    model = NGM.load(model_dir)
    raw = read_csv_file(data)
    extra_names = [c for c in raw.columns if c not in model.schema]
    inferred, _ = infer_schema(raw[extra_names]) if extra_names else (Schema(()), {})
    schema = Schema(tuple(model.schema[c] for c in raw.columns if c in model.schema) + inferred.features)
    frame = schema.encode(raw, str(data))
    settings = model.settings if epochs is None else NGMSettings.from_dict({**asdict(model.settings),
                                                                          "epochs": epochs})
    stitched = stitch_model(model, frame, schema, glasso_graph(frame, schema, sparsity), settings)
    with outputs:
        stitched.save(out)
    console.print(f"stitched NGM with extra feature(s) {extra_names} saved to {out}")

