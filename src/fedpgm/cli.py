"""The ``fedpgm`` command line: one Typer app, one sub-command (group) per capability.

User errors (``FedpgmError``) print one line, ``error: ...``, on stderr and exit with code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fedpgm.federation.apps import check_backend
from fedpgm.cli_common import (Backend, BatchSize, Device, Epochs, Inputs, Pieces, Structure, TrainMethod, Units,
                               dense_params, em_passes, Alpha, AnswersOut, DataDir, EmIterations, Evidence, Force,
                               EmBatchSize, Keep, Label, LatentStates, LeafModel, Missing, Mpe, RowClusters,  # noqa: F401
                               QueryColumns, Rows, SchemaFile, Seed, Target, TestSize, answer_queries,
                               console, finish, load, one_of, prepare_outputs, stages)
from fedpgm.errors import FedpgmError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Federated learning of probabilistic, graphical and interpretable models.")


def print_version(value: bool) -> None:
    if value:
        from fedpgm import __version__

        console.print(f"fedpgm {__version__}")
        raise typer.Exit()


@app.callback()
def options(version: Annotated[bool, typer.Option("--version", callback=print_version, is_eager=True,
                                                  help="Print the version and exit")] = False) -> None:
    """Federated learning of probabilistic, graphical and interpretable models."""


def types_text(types: dict[str, int]) -> str:
    """``{"continuous": 3, "binary": 1}`` -> ``"3 cont, 1 bin"``."""
    return ", ".join(f"{n} {k[:3] if k != 'continuous' else 'cont'}" for k, n in types.items())


@app.command()
def datasets(data_dir: DataDir = None) -> None:
    """List the dataset registry: name, rows, columns, column types, label."""
    from fedpgm.data.registry import REGISTRY, LoadOptions, describe_dataset

    options = LoadOptions(data_dir=data_dir)
    table = Table(title="fedpgm datasets")
    table.add_column("name", no_wrap=True)
    for col in ("rows", "cols", "types", "label"):
        table.add_column(col, overflow="fold")
    for name, loader in REGISTRY.items():
        members = [None] if not loader.family else (loader.members(options) if loader.members else [])
        for member in members:
            spec = name if member is None else f"{name}:{member}"
            try:
                d = describe_dataset(spec, options)
            except FedpgmError as e:
                table.add_row(spec, "-", "-", "-", "-")
                console.print(f"[yellow]{spec} unavailable:[/] {e}")
                continue
            table.add_row(spec, str(d["rows"]), str(d["columns"]), types_text(d["types"]),
                          str(d["label"] or "-"))
    console.print(table)
    for name, loader in REGISTRY.items():
        console.print(f"[bold]{name}{':...' if loader.family else ''}[/]  {loader.description}")


@app.command()
def schema(dataset: str, data_dir: DataDir = None, label: Label = None, keep: Keep = None,
           out: Annotated[Optional[Path], typer.Option("--out", help="Write the schema JSON here")] = None,
           seed: Seed = 0) -> None:
    """Show a dataset's schema (inferred for csv:PATH, with the reason for each type)."""
    prepare_outputs(out=out)
    ds = load(dataset, data_dir, seed, label=label)
    table = Table(title=f"schema of {ds.name}")
    for col in ("column", "type", "categories"):
        table.add_column(col, overflow="fold")
    for f in ds.schema.features:
        cats = "" if f.categories is None else ", ".join(f.categories[:12]) + (
            " ..." if f.cardinality > 12 else "")
        name = f.name + (" (label)" if f.name == ds.schema.label else "")
        table.add_row(name, f.kind, cats)
    console.print(table)
    if "schema_source" in ds.info:
        console.print(ds.info["schema_source"])
    if out is not None:
        ds.schema.save(out)
        console.print(f"wrote {out}")


def print_partition(part) -> None:
    table = Table(title=f"{part.dataset}: {part.split} partition, {len(part.clients)} clients")
    for col in ("client", "train rows", "test rows", "columns", "label", "classes"):
        table.add_column(col)
    for row in part.summary():
        table.add_row(row["client"], str(row["train_rows"]), str(row["test_rows"]),
                      str(row["columns"]), "yes" if row["label"] else "no",
                      ",".join(map(str, row.get("classes", []))) or "-")
    console.print(table)


@app.command("partition")
def partition_cmd(
    dataset: str,
    split: Annotated[str, typer.Option("--split", help="horizontal, vertical or hybrid", click_type=one_of("split"))],
    clients: Annotated[int, typer.Option("--clients", help="Number of clients K")],
    out: Annotated[Path, typer.Option("--out", help="Folder for client CSVs + manifest.json")],
    seed: Seed = 0,
    scheme: Annotated[Optional[str], typer.Option(help="horizontal: iid, label-skew, dirichlet",
                                                  click_type=one_of("scheme"))] = None,
    alpha: Annotated[Optional[float], typer.Option(help="horizontal dirichlet: concentration")] = None,
    classes_per_client: Annotated[Optional[int], typer.Option(help="horizontal label-skew")] = None,
    groups: Annotated[Optional[str], typer.Option(help='vertical: column groups "a,b;c,d"')] = None,
    label_to: Annotated[Optional[str], typer.Option(help="vertical/hybrid: client id or 'all'")] = None,
    shared: Annotated[Optional[int], typer.Option(help="hybrid: number of shared columns")] = None,
    overlap: Annotated[Optional[float], typer.Option(
        help="hybrid, vertical: fraction of rows on all clients (vertical: default 1, every row; below "
             "1 the parties' ids differ, see fedpc fit --align)")] = None,
    force: Annotated[bool, typer.Option(help="Replace a non-empty --out folder")] = False,
    data_dir: DataDir = None, rows: Rows = None, label: Label = None, schema: SchemaFile = None,
    missing: Missing = None, test_size: TestSize = None, keep: Keep = None,
) -> None:
    """Split a dataset across K clients; write one CSV per client and a JSON manifest."""
    from fedpgm.data import partition

    prepare_outputs(out, force)

    options = {k: v for k, v in dict(scheme=scheme, alpha=alpha, classes_per_client=classes_per_client,
                                       groups=groups, label_to=label_to, shared=shared,
                                       overlap=overlap).items() if v is not None}
    ds = load(dataset, data_dir, seed, rows, label, schema, missing, test_size)
    part = partition(ds, split, clients, seed, **options)
    part.write(out, overwrite=force)
    print_partition(part)
    console.print(f"wrote {out}/manifest.json and {len(part.clients)} client CSV pairs")


federation_app = typer.Typer(no_args_is_help=True, help="The federation runtime.")
app.add_typer(federation_app, name="federation")


@federation_app.command("moments")
def federation_moments(
    partition_dir: Path,
    backend: Backend = "inprocess",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here")] = None,
) -> None:
    """Federated mean/covariance over client CSVs written by `fedpgm partition` (the
    runtime's reference algorithm), on either backend, with its communication cost."""
    from fedpgm.data import read_partition
    from fedpgm.federation import InProcessFederation
    from fedpgm.federation.reference import federated_moments

    prepare_outputs(json=json_out)

    handlers = "fedpgm.federation.reference:HANDLERS"
    if backend == "inprocess":
        with InProcessFederation(read_partition(partition_dir), handlers) as fed:
            result = federated_moments(fed)
    elif check_backend(backend) in ("flower", "simulation"):
        from fedpgm.federation.deploy import LoopbackDeployment

        with console.status("starting a SuperLink and SuperNodes on 127.0.0.1 ..."):
            with LoopbackDeployment(partition_dir, simulation=backend == "simulation") as dep:
                result = dep.run("moments", "moments")
    console.print(f"{result['n']} rows over {len(result['clients'])} clients; "
                  f"{len(result['columns'])} columns")
    for name, mean in list(zip(result["columns"], result["mean"]))[:5]:
        console.print(f"  mean {name} = {mean:.6g}")
    for client, why in result["failed"].items():
        console.print(f"[yellow]left out {client}:[/] {why}")
    finish("federation moments", result, json_out, dataset=str(partition_dir), settings={"backend": backend})


@federation_app.command("naive-bayes")
def federation_naive_bayes(
    partition_dir: Path,
    backend: Backend = "inprocess",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the report JSON here")] = None,
) -> None:
    """Gaussian naive Bayes across the clients of a horizontal partition (class sums only; the
    worked example of docs/extending.md); accuracy on the clients' test files."""
    from fedpgm.naive_bayes import run

    prepare_outputs(json=json_out)
    with stages(f"naive Bayes across {partition_dir} ({backend})"):
        result = run(partition_dir, backend)
    finish("federation naive-bayes", result, json_out, settings={"backend": backend,
                                                                "partition": str(partition_dir)})


pc_app = typer.Typer(no_args_is_help=True, help="Probabilistic circuits: learn, save, query.")
app.add_typer(pc_app, name="pc")


@pc_app.command("fit")
def pc_fit(
    dataset: str,
    learner: Annotated[str, typer.Option(help="learnspn, learnspn-cv (LearnSPN choosing its settings on 10% of the "
                                              "training rows within --budget-s), ratspn, or pd (dense circuits, "
                                              "images: the label is left out and the circuit models the "
                                              "pixels)")] = "learnspn",
    min_instances: Annotated[int, typer.Option(help="LearnSPN: min rows per slice")] = 100,
    threshold: Annotated[float, typer.Option(help="LearnSPN: RDC independence threshold")] = 0.3,
    leaf: Annotated[str, typer.Option(help="continuous leaves: gaussian or histogram (Mixed SPN)",
                                      click_type=one_of("leaf"))] = "gaussian",
    leaf_model: LeafModel = "univariate", alpha: Alpha = 0.1, row_clusters: RowClusters = 2,
    latent_states: LatentStates = 12, em_batch_size: EmBatchSize = None,
    depth: Annotated[int, typer.Option(help="RAT-SPN: region-graph depth")] = 2,
    repetitions: Annotated[int, typer.Option(help="RAT-SPN: repetitions")] = 4,
    em_iterations: EmIterations = None,
    select: Annotated[Optional[str], typer.Option(
        help="LearnSPN: 'validation' chooses --min-instances, --threshold, --leaf-model, --alpha, --row-clusters "
             "and --em-iterations on the validation rows within --budget-s (fedpgm.circuits.selection); a "
             "dataset without a validation split gives up 10% of its training rows",
        click_type=one_of("select"))] = None,
    budget_s: Annotated[float, typer.Option("--budget-s", min=1.0, help="--select and learnspn-cv: wall-time "
                                                                       "budget, seconds")] = 120.0,
    structure: Structure = "pd", units: Units = 10, pieces: Pieces = 8, inputs: Inputs = "gaussian",
    epochs: Epochs = 5, train: TrainMethod = "online", batch_size: BatchSize = 64, device: Device = "auto",
    seed: Seed = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Save the model (safetensors + JSON) here")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the fit report JSON here")] = None,
    force: Force = False,
    data_dir: DataDir = None, rows: Rows = None, label: Label = None, schema: SchemaFile = None,
    missing: Missing = None, test_size: TestSize = None, keep: Keep = None,
) -> None:
    """Learn a circuit on DATASET's train split; report the mean test log-likelihood (nats) and,
    given a label, the test accuracy and macro-F1 of predicting it."""
    import time

    import numpy as np

    from fedpgm.circuits.learners import DENSE_LEARNERS, ESTIMATORS
    from fedpgm.data.images import bits_per_dim

    if learner not in ESTIMATORS:
        raise FedpgmError(f"unknown learner '{learner}'; use one of {sorted(ESTIMATORS)}")
    if min_instances < 1:
        raise FedpgmError(f"--min-instances must be >= 1, got {min_instances}")
    if select is not None and learner != "learnspn":
        raise FedpgmError("--select chooses LearnSPN's settings; use it with --learner learnspn")
    dense = learner in DENSE_LEARNERS
    passes = em_passes(learner, em_iterations)
    params = ({"min_instances_slice": min_instances, "threshold": threshold, "leaf": leaf, "leaf_model": leaf_model,
               "alpha": alpha, "row_clusters": row_clusters, "em_iterations": passes, "seed": seed,
               "latent_states": latent_states, "em_batch_size": em_batch_size}
              if learner == "learnspn" else
              {"budget_s": budget_s, "leaf": leaf, "seed": seed} if learner == "learnspn-cv" else
              dense_params(structure, units, pieces, inputs, epochs, train, batch_size, device, seed) if dense else
              {"depth": depth, "repetitions": repetitions, "em_iterations": passes, "leaf": leaf,
               "seed": seed})
    model = ESTIMATORS[learner](**params).check_params()  # a bad setting is refused before the data is read
    outputs = prepare_outputs(out, force, json=json_out)
    ds = load(dataset, data_dir, seed, rows, label, schema, missing, test_size)
    if dense:
        ds = ds.drop_label()
        model.check_data(ds.schema)
    selection = None
    with stages(f"learning a {learner} circuit on {ds.name} ({len(ds.train)} rows)"
                + (f", settings chosen on validation within {budget_s:g} s" if select else ""),
                total=epochs if dense else None) as update:
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        if select is not None:
            from fedpgm.circuits.selection import select_learnspn

            fit_rows, valid_rows = ds.train, ds.valid
            if valid_rows is None:  # a validation split from the training rows
                held = np.random.default_rng(seed).permutation(len(fit_rows))[: max(1, len(fit_rows) // 10)]
                valid_rows, fit_rows = fit_rows.iloc[np.sort(held)], fit_rows.drop(fit_rows.index[held])
            model, selection = select_learnspn(fit_rows, valid_rows, ds.schema, budget_s, seed, leaf=leaf)
            chosen = selection["chosen"]  # (a mixture's: its components' settings and weights)
            params = {**params, **chosen} if "components" not in chosen else {**chosen, "seed": seed, "leaf": leaf}
        elif dense:
            model.fit(ds.train, ds.schema, progress=lambda epoch, ll: update(
                description=f"epoch {epoch}: train log-likelihood {ll:.2f} nats/row", completed=epoch))
        else:
            model.fit(ds.train, ds.schema)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    stats = {"n_params": model.n_params} if dense else model.circuit_.stats()
    report = {"dataset": ds.name, "learner": learner, "params": params, "n_train": len(ds.train),
              "n_test": len(ds.test), "n_features": len(ds.schema), "train_seconds": seconds,
              "critical_path_seconds": cpu, "test_loglik": model.score(ds.test), "train_loglik": model.score(ds.train),
              **stats}
    if dense:
        report["device"] = str(model.circuit_.device)
        if model.circuit_.levels:
            report["test_bpd"] = bits_per_dim(report["test_loglik"], len(ds.schema))
    if ds.valid is not None:
        report["valid_loglik"] = model.score(ds.valid)
    if ds.schema.label is not None and not dense:  # the label's test accuracy, macro-F1 (and F1 if binary)
        from fedpgm.fedpc.experiment import classification

        report.update(classification(model.predict_proba(ds.test), ds.test[ds.schema.label].to_numpy(dtype=float)))
    if selection is not None:
        report["selection"] = selection
    with outputs:
        if out is not None:
            model.save(out)
        finish("pc fit", report, json_out, settings={"learner": learner, "params": params})


@pc_app.command("query")
def pc_query(
    model_dir: Path,
    evidence: Evidence,
    query: QueryColumns = None,
    target: Target = None,
    mpe: Mpe = False,
    out: AnswersOut = None,
) -> None:
    """Answer marginal (default), conditional, classification or MPE queries from a CSV."""
    from fedpgm.circuits.learners import load_model

    model = load_model(model_dir)
    answer_queries(model, model.schema_, evidence, query, target, mpe, out)


@pc_app.command("sample")
def pc_sample(
    model_dir: Path,
    n: Annotated[int, typer.Option("-n", help="Number of samples", min=1, max=10_000)] = 64,
    png: Annotated[Optional[Path], typer.Option("--png", help="Image models: write the samples as a grid")] = None,
    csv: Annotated[Optional[Path], typer.Option("--csv", help="Write the samples as CSV (schema columns)")] = None,
    seed: Seed = 0,
) -> None:
    """Draw N samples from a saved circuit (pc fit --out); images as a PNG grid."""
    import pandas as pd

    from fedpgm.circuits.learners import load_model
    from fedpgm.data.images import save_grid
    from fedpgm.files import write_text_atomic

    if png is None and csv is None:
        raise FedpgmError("say where the samples go: --png FILE (image models) and/or --csv FILE")
    prepare_outputs(png=png, csv=csv)
    model = load_model(model_dir)
    samples = model.sample(n, seed=seed)
    if png is not None:
        save_grid(samples, model.schema_, png, f"{n} samples from {model_dir.name}")
    if csv is not None:
        frame = model.schema_.decode(pd.DataFrame(samples, columns=model.schema_.names))
        write_text_atomic(csv, frame.to_csv(index=False))
    console.print(f"{n} samples from {model_dir}" + (f"; grid in {png}" if png else "")
                  + (f"; CSV in {csv}" if csv else ""))


@pc_app.command("inpaint")
def pc_inpaint(
    model_dir: Path,
    dataset: str,
    n: Annotated[int, typer.Option("-n", help="Test images to inpaint", min=1, max=1_000)] = 16,
    hide: Annotated[str, typer.Option(help="Pixels to hide: the bottom half, the right half or a centre square",
                                      click_type=one_of("hide"))] = "bottom",
    how: Annotated[str, typer.Option(help="sample (exact conditional) or max (most probable branch)",
                                     click_type=one_of("how"))] = "sample",
    png: Annotated[Path, typer.Option("--png", help="Write the image grid (PNG) here")] = Path("inpainting.png"),
    seed: Seed = 0,
    data_dir: DataDir = None,
) -> None:
    """Hide part of N test images of DATASET and fill it in from a saved image circuit: a PNG whose
    rows are the originals, what the model saw, and its completions."""
    import numpy as np

    from fedpgm.circuits.learners import load_model
    from fedpgm.data.images import hide_pixels, layout, save_grid

    prepare_outputs(png=png)
    model = load_model(model_dir)
    if layout(model.schema_) is None:
        raise FedpgmError(f"{model_dir} models no image (pixel_ROW_COL columns); inpainting needs one")
    ds = load(dataset, data_dir, seed).drop_label()
    if ds.schema.names != model.schema_.names:
        raise FedpgmError(f"{dataset}'s pixels differ from the model's; pass the dataset it was fitted on")
    x = ds.test[ds.schema.names].to_numpy(dtype=float)[:n]
    masked = hide_pixels(x, model.schema_, hide)
    filled = model.complete(masked, how, seed)
    save_grid(np.concatenate([x, np.where(np.isnan(masked), 0.0, masked), filled]), model.schema_, png,
              f"originals / {hide} hidden / completed ({how})", rows=3)
    hidden = np.isnan(masked)
    err = float(np.abs(filled[hidden] - x[hidden]).mean())
    console.print(f"inpainted {len(x)} images ({hide} hidden, {how}); mean absolute error on the hidden "
                  f"pixels {err:.2f}; grid in {png}")


dec_app = typer.Typer(no_args_is_help=True,
                      help="Cost of decentralization in vertical federations (exact Bayesian losses).")
app.add_typer(dec_app, name="decentralization")
JsonOut = Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here")]
PlotOut = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG plot here (with --curve)")]


def report_losses(result: dict, bits: bool) -> None:
    from fedpgm.decentralization.examples import to_bits

    unit = "bits" if bits else "nats"
    losses = to_bits(result["losses_nats"]) if bits else result["losses_nats"]
    console.print("  ".join(f"{k} {v:.6f}" for k, v in losses.items()) + f" ({unit})")


def report_curve(command: str, settings: dict, rows: list[dict], x_key: str, x_label: str, title: str, bits: bool,
                 plot: Path | None, json_out: Path | None) -> None:
    """Print one line per point, then write the plot and the JSON when asked."""
    from fedpgm.decentralization.examples import plot_curve

    for row in rows:
        console.print(f"{x_label} = {row[x_key]:.3f}:", end=" ")
        report_losses(row, bits)
    if plot is not None:
        plot_curve(rows, x_key, x_label, plot, title)
    finish(command, rows, json_out, settings=settings, show=False)


@dec_app.command("example-a")
def dec_example_a(
    r: Annotated[float, typer.Option(help="P[X1 = X2]")] = 0.75,
    n: Annotated[int, typer.Option(help="training samples N")] = 3,
    curve: Annotated[bool, typer.Option(help="a grid over r (the paper's Fig. 2)")] = False,
    bits: Annotated[bool, typer.Option(help="print losses in bits")] = False,
    json_out: JsonOut = None, plot: PlotOut = None,
) -> None:
    """Example A: two agents, losses of CL/CI, CL/DI, DL/CI, DL/DI vs I(X1; X2)."""
    from fedpgm.decentralization import examples as ex
    from fedpgm.decentralization.bruteforce import conditional_mutual_informations

    prepare_outputs(json=json_out, plot=plot)
    if curve:
        report_curve("decentralization example-a", {"n": n, "curve": True}, ex.example_a_curve(n), "mi_bits",
                     "I(X1; X2) (bits)",
                     f"Example A, N = {n}, no privacy", bits, plot, json_out)
        return
    result = ex.example_a_point(r, n)
    if n <= 4:  # the same mutual informations by independent enumeration of sequences
        result["conditional_mi_nats_enumeration"] = conditional_mutual_informations(ex.example_a(r, n))
    report_losses(result, bits)
    finish("decentralization example-a", result, json_out, settings={"r": r, "n": n}, show=False)


@dec_app.command("example-b")
def dec_example_b(
    r: Annotated[float, typer.Option(help="P[X1 = X2] = P[X3 = X2]")] = 0.5,
    eps: Annotated[float, typer.Option(help="privacy budget in bits")] = 0.5,
    n: Annotated[int, typer.Option(help="training samples N")] = 3,
    curve: Annotated[bool, typer.Option(help="a grid over eps (the paper's Fig. 3)")] = False,
    bits: Annotated[bool, typer.Option(help="print losses in bits")] = False,
    json_out: JsonOut = None, plot: PlotOut = None,
) -> None:
    """Example B: three agents sharing X1^X2^X3^E; eps-private losses, optimal noise s."""
    from fedpgm.decentralization import examples as ex
    from fedpgm.decentralization.bruteforce import conditional_mutual_informations

    prepare_outputs(json=json_out, plot=plot)
    if curve:
        report_curve("decentralization example-b", {"r": r, "n": n, "curve": True}, ex.example_b_curve(r, n),
                     "eps_bits", "privacy budget eps (bits)",
                     f"Example B, r = {r}, N = {n}", bits, plot, json_out)
        return
    result = ex.example_b_point(r, eps, n)
    if n <= 2:  # the same mutual informations by enumeration of every sequence: 16^(N+1) terms
        result["conditional_mi_nats_enumeration"] = conditional_mutual_informations(ex.example_b(r, n))
    console.print(f"optimal noise s: {result['s']}")
    report_losses(result, bits)
    finish("decentralization example-b", result, json_out, settings={"r": r, "eps_bits": eps, "n": n}, show=False)


@dec_app.command("estimate")
def dec_estimate(
    dataset: str,
    clients: Annotated[int, typer.Option("--clients", help="agents K (vertical split)")] = 2,
    seed: Seed = 0,
    min_instances: Annotated[int, typer.Option(help="LearnSPN min rows per slice")] = 200,
    threshold: Annotated[float, typer.Option(help="LearnSPN RDC threshold")] = 0.3,
    rounds: Annotated[int, typer.Option(help="bootstrap resamples")] = 1000,
    data_dir: DataDir = None, json_out: JsonOut = None,
) -> None:
    """Per-agent CL/CI, CL/DI and DL/DI log-loss on held-out rows, with 95% bootstrap intervals."""
    from fedpgm.decentralization.estimates import estimate

    if clients < 1:
        raise FedpgmError(f"--clients must be >= 1, got {clients}")
    if rounds < 1:
        raise FedpgmError(f"--rounds must be >= 1 (bootstrap resamples), got {rounds}")
    prepare_outputs(json=json_out)
    with console.status(f"learning circuits on {dataset} ..."):
        result = estimate(dataset, clients, seed, min_instances, threshold, rounds=rounds, data_dir=data_dir)
    lo, hi = result["CL/CI"]["ci95"]
    console.print(f"CL/CI log-loss {result['CL/CI']['log_loss_nats']:.4f} nats [{lo:.4f}, {hi:.4f}]")
    table = Table(title=f"{result['dataset']}: cost of decentralization per agent (nats, 95% CI)")
    for col in ("agent", "CL/DI", "DL/DI", "CL/DI-CL/CI", "DL/DI-CL/CI", "DL/DI-CL/DI"):
        table.add_column(col)
    for agent, v in result["agents"].items():
        table.add_row(agent, *[f"{v[k]['nats']:.4f} [{v[k]['ci95'][0]:.3f}, {v[k]['ci95'][1]:.3f}]"
                               for k in ("CL/DI", "DL/DI", "CL/DI-CL/CI", "DL/DI-CL/CI", "DL/DI-CL/DI")])
    console.print(table, width=min(console.width, 80))
    finish("decentralization estimate", result, json_out, show=False,
           settings={"clients": clients, "seed": seed, "bootstrap_rounds": rounds,
                     "learner": result.pop("learner")})


@app.command("run")
def run_config(
    config: Annotated[Path, typer.Argument(help="A TOML experiment file (see fedpgm.fedpc.config_run)")],
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder (default: out = ... in the file's \\[experiment] table)")] = None,
    force: Force = False,
) -> None:
    """Run the experiment a TOML file describes: FC[PC]/FC[DT] runs and baselines on one dataset,
    with a summary table, report.json and summary.png."""

    from fedpgm.fedpc.config_run import COLUMNS, read_config, run_experiment, run_values, write_outputs
    from rich import box
    from rich.markup import escape

    spec = read_config(config)
    folder = out or spec["experiment"].get("out")
    if folder is None:
        raise FedpgmError("say where to write the results: --out DIR or [experiment] out = \"DIR\"")
    outputs = prepare_outputs(Path(folder), force)
    with stages("loading") as update:
        report = run_experiment(spec, progress=lambda text: update(description=text))
    metrics = report["metrics"]
    table = Table(title=f"{report['dataset']} ({metrics['n_train']} train / {metrics['n_test']} test rows)",
                  box=box.SIMPLE, padding=(0, 1), pad_edge=False)
    table.add_column("run", overflow="fold")
    for _, _, header in COLUMNS:
        table.add_column(header, justify="right")
    for name, values in run_values(report).items():
        table.add_row(escape(name), *["-" if values[key] is None else f"{values[key]:,}" if key == "bytes"
                                      else f"{values[key]:.3f}" for _, key, _ in COLUMNS])
    console.print(table, width=min(console.width, 80))
    with outputs:
        write_outputs(report, folder)
    console.print(f"wrote {folder}/report.json and summary.png")


@app.command()
def demo() -> None:
    """The main job: FedPC on breast cancer across horizontal, vertical and hybrid federations."""
    from fedpgm.fedpc.cli import demo as fedpc_demo

    fedpc_demo()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the app, turning user errors into one line and exit code 2, and
    SIGTERM/SIGHUP into a clean stop (every process started stopped, temporary folders removed,
    nothing half-written) with exit code 128 + the signal (143 for SIGTERM)."""
    import click

    from fedpgm.federation.lifecycle import Terminated, stop_on_signals

    try:
        with stop_on_signals():
            code = app(args=argv, prog_name="fedpgm", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError:  # a group without a command (typer printed its help)
        sys.exit(2)
    except click.UsageError as e:  # a bad option or value, before any work
        where = f"; see `{e.ctx.command_path} --help`" if e.ctx else ""
        print(f"error: {' '.join(e.format_message().split()).rstrip('.')}{where}", file=sys.stderr)
        sys.exit(2)
    except click.ClickException as e:
        print(f"error: {e.format_message()}", file=sys.stderr)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:  # Ctrl-C at a prompt
        sys.exit(130)
    except FedpgmError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Terminated as t:
        print(f"fedpgm: {t}; stopped every process it started and removed its temporary files",
              file=sys.stderr)
        sys.exit(128 + t.signum)
    sys.exit(code if isinstance(code, int) else 0)  # (--help, --version: 0)


def register_groups() -> None:
    """Sub-command groups that live beside their capability (imported last: they use the
    shared options above)."""
    from fedpgm.concepts.cli import concepts_app
    from fedpgm.fedpc.cli import fedpc_app
    from fedpgm.ngm.cli import ngm_app

    app.add_typer(concepts_app, name="concepts")
    app.add_typer(fedpc_app, name="fedpc")
    app.add_typer(ngm_app, name="ngm")


register_groups()

if __name__ == "__main__":
    main()
