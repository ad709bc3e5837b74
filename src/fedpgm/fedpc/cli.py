"""``fedpgm fedpc fit | evaluate | query`` and the main job (``fedpgm demo``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.table import Table

from fedpgm.cli_common import (AnswersOut, Backend, BatchSize, DataDir, Device, Epochs, Evidence, Force, Inputs, Label,
                               em_passes, Alpha, EmIterations, Keep, LeafModel, Missing, Mpe, RowClusters, Pieces,
                               QueryColumns, Rows, Structure, TrainMethod, Units,
                               dense_params, SchemaFile, Seed, Target, TestSize, Timeout, answer_queries, check_timeout,
                               console, finish, load, one_of, prepare_outputs, stages)
from fedpgm.errors import FedpgmError

fedpc_app = typer.Typer(no_args_is_help=True, help="Federated probabilistic circuits (FedPC): one-pass "
                        "learning across horizontal, vertical and hybrid federations.")
JsonOut = Annotated[Optional[Path], typer.Option("--json", help="Write the report JSON here")]


def partition_options(scheme, label_to, shared, overlap, regions=None, band=None) -> dict:
    return {k: v for k, v in dict(scheme=scheme, label_to=label_to, shared=shared, overlap=overlap,
                                  regions=regions, band=band).items() if v is not None}


def run_with_progress(ds, settings, out: Path | None):
    from fedpgm.fedpc.experiment import run_fedpc

    with stages(f"FedPC on {ds.name}: {settings.split} x{settings.clients} ({settings.backend}) and the "
                "centralized reference"):
        return run_fedpc(ds, settings, out)


def slice_minimum(value: str) -> int | None:
    """``--min-instances``: a whole number >= 1, or "auto" (None: each client resolves it)."""
    if value == "auto":
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise FedpgmError(f"--min-instances must be a whole number >= 1 or auto, got {value!r}")
    return number


@fedpc_app.command("fit")
def fit(
    dataset: str,
    split: Annotated[str, typer.Option(help="horizontal, vertical or hybrid", click_type=one_of("split"))],
    clients: Annotated[int, typer.Option(help="Number of clients K")],
    clusters: Annotated[Optional[int], typer.Option(
        help="Clusters per single-client subspace (adapts by default: 1, the plain product of the client "
             "circuits, for random and combinatorial gluing; 32 for aligned; the paper: 2)",
        show_default="auto")] = None,
    glue: Annotated[str, typer.Option(help="auto (aligned where two or more clients hold columns of their own and "
                                           "all take part, else random: adapts), random (Algorithm 1, the "
                                           "paper's), combinatorial (Table 4's runs), or "
                                           "aligned (the server learns how often the clients' clusters "
                                           "co-occur on shared rows, from a masked sum; no row's cluster)",
                                      click_type=one_of("glue"))] = "auto",
    smoothing: Annotated[Optional[float], typer.Option(
        help="aligned gluing: pseudo-rows per observed tuple of cluster indices, pulling their co-occurrence "
             "toward the plain product of the client circuits (0: the counts alone; auto: the product's "
             "weight chosen on held-out tuples)", show_default="auto", min=0.0)] = None,
    cluster_fit: Annotated[str, typer.Option(
        help="how each client fits its cluster circuits: learn (a structure learned on each cluster's rows, "
             "the paper's), refit (LearnSPN: its circuit of all rows, refitted by EM on each cluster's rows; "
             "faster, on the corpus of docs/real_tables.md lower log-likelihood)",
        click_type=one_of("cluster_fit"))] = "learn",
    refine_passes: Annotated[Optional[int], typer.Option(
        help="horizontal: at most this many passes of federated EM over every client's rows after the one "
             "pass, kept while each client's held-out rows score better (0: the paper's one pass)",
        show_default="auto: 3", min=0, max=10)] = None,
    products: Annotated[Optional[int], typer.Option(help="random gluing: number of products P")] = None,
    learner: Annotated[str, typer.Option(help="local learner: learnspn, learnspn-cv (each client chooses its "
                                              "LearnSPN settings on 10% of its rows within --budget-s per circuit), "
                                              "ratspn, pd (dense circuits for images: the label only shapes the "
                                              "partition), or tree (FC[DT]: a decision tree per labelled client "
                                              "under one root)")] = "learnspn",
    budget_s: Annotated[float, typer.Option("--budget-s", min=1.0, help="learnspn-cv: selection's wall-time "
                                                                       "budget per circuit, seconds")] = 120.0,
    max_depth: Annotated[Optional[int], typer.Option(help="tree: maximum depth (default: unlimited)")] = None,
    min_leaf: Annotated[Optional[int], typer.Option(help="tree: min rows per leaf (default: 5 under a mean "
                                                         "root; each client's cross-validated choice under a "
                                                         "product root)")] = None,
    tree_root: Annotated[str, typer.Option(help="tree: auto (product over disjoint columns, else mean), "
                                                "mean (the paper's bagging) or product",
                                           click_type=one_of("tree_root"))] = "auto",
    ensemble: Annotated[str, typer.Option(help="tree: each client's expert, bagging (decision trees) or "
                                               "boosting (gradient-boosted trees)",
                                          click_type=one_of("ensemble"))] = "bagging",
    trees: Annotated[Optional[int], typer.Option(help="tree: trees per client; bagging: default 1, each on a "
                                                      "bootstrap resample when above 1; boosting: the most "
                                                      "stages, default 100, early-stopped")] = None,
    min_instances: Annotated[str, typer.Option(
        help="LearnSPN: min rows per slice, a number (the paper: 100) or auto (adapts: each client takes the "
             "square root of the rows of each circuit it learns, within 10..100 and at least its policy's "
             "min_rows)"
    )] = "auto",
    threshold: Annotated[float, typer.Option(help="LearnSPN: RDC independence threshold (the paper's)")] = 0.3,
    leaf: Annotated[str, typer.Option(help="continuous leaves: gaussian or histogram",
                                      click_type=one_of("leaf"))] = "gaussian",
    leaf_model: LeafModel = "univariate", alpha: Alpha = 0.1, row_clusters: RowClusters = 2,
    by_label: Annotated[bool, typer.Option(help="LearnSPN: root sum over the label's values, one structure "
                                                "per class (a generative classifier p(y) p(x | y))")] = False,
    em_iterations: EmIterations = None,
    restarts: Annotated[int, typer.Option(help="RAT-SPN: initialisations per circuit, the best training "
                                               "log-likelihood kept")] = 1,
    structure: Structure = "pd", units: Units = 10, pieces: Pieces = 8, inputs: Inputs = "gaussian",
    epochs: Epochs = 5, train: TrainMethod = "online", batch_size: BatchSize = 64, device: Device = "auto",
    placement: Annotated[str, typer.Option(help="server (clients send circuits) or split (clients keep "
                                                "them; queries go to the clients)",
                                           click_type=one_of("placement"))] = "server",
    backend: Backend = "inprocess",
    scheme: Annotated[Optional[str], typer.Option(help="horizontal: iid, label-skew, dirichlet",
                                                  click_type=one_of("scheme"))] = None,
    label_to: Annotated[Optional[str], typer.Option(help="vertical/hybrid: client id or 'all'")] = None,
    shared: Annotated[Optional[int], typer.Option(help="hybrid: number of shared columns")] = None,
    regions: Annotated[Optional[str], typer.Option(help="images, vertical/hybrid: each client holds one image region "
                                                        "(halves: 2 clients, quadrants: 4)",
                                                   click_type=one_of("regions"))] = None,
    band: Annotated[Optional[int], typer.Option(help="images, hybrid: pixels by which neighbouring regions "
                                                     "overlap on each side of a cut (default 2)", min=0)] = None,
    overlap: Annotated[Optional[float], typer.Option(
        help="hybrid, vertical: fraction of rows on all clients (vertical: default 1, every row; below "
             "1 the parties' ids differ, see fedpc fit --align)")] = None,
    align: Annotated[str, typer.Option(help="none (vertical parties hold the same row ids) or psi (find the "
                                            "ids all parties hold by private set intersection and fit "
                                            "on those)", click_type=one_of("align"))] = "none",
    no_centralized: Annotated[bool, typer.Option("--no-centralized", help="Skip the centralized reference")] = False,
    timeout: Timeout = 3600.0,
    min_clients: Annotated[Optional[int], typer.Option(help="horizontal: go on without clients that fail or "
                                                            "overrun while this many answer (named in the "
                                                            "report as left_out)")] = None,
    seed: Seed = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Save the model here")] = None,
    json_out: JsonOut = None,
    force: Force = False,
    data_dir: DataDir = None, rows: Rows = None, label: Label = None, schema: SchemaFile = None,
    missing: Missing = None, test_size: TestSize = None, keep: Keep = None,
) -> None:
    """Partition DATASET, learn a FedPC in one pass, and report it next to centralized LearnSPN.

    The paper's defaults: RDC threshold 0.3 (and random gluing, Algorithm 1).
    Defaults that adapt (auto): the slice minimum, from the rows of each
    circuit a client learns (their square root, within 10..100); the gluing
    (aligned where two or more clients hold columns of their own, from a masked
    sum of their cluster indices, else random); the clusters per subspace (1 for
    random and combinatorial gluing: no blind pairing across clients; 32 for
    aligned, mixed with the plain product of the clients). A value fixes any
    of them (the paper's: --glue random --min-instances 100 --clusters 2)."""
    from fedpgm.circuits.learners import LEARNERS
    from fedpgm.fedpc.experiment import FitSettings

    slice_min = slice_minimum(min_instances)
    if restarts < 1:
        raise FedpgmError(f"--restarts must be >= 1, got {restarts}")
    check_timeout(timeout)
    if placement == "split" and out is not None:
        raise FedpgmError("--out saves an assembled model; with --placement split the circuits stay at "
                          "the clients, so use --placement server to save one")
    fcdt = learner == "tree"  # (FC[DT]: a family method of its own, not a circuit learner)
    spec = LEARNERS.get(learner)  # (an unknown name is refused by FitSettings.check, which names the choices)
    if fcdt:
        params = {"max_depth": max_depth, "min_samples_leaf": min_leaf, "combine": tree_root, "trees": trees,
                  "ensemble": ensemble}
    elif spec is not None and spec.dense:
        params = dense_params(structure, units, pieces, inputs, epochs, train, batch_size, device, seed)
    else:  # the circuit learner's spec says which of these it takes
        params = spec.settings({
            "min_instances_slice": slice_min, "threshold": threshold, "leaf": leaf, "by_label": by_label,
            "leaf_model": leaf_model, "alpha": alpha, "row_clusters": row_clusters,
            "em_iterations": em_passes(learner, em_iterations), "budget_s": budget_s,
            "restarts": restarts}) if spec else {}
    settings = FitSettings(split=split, clients=clients, clusters=clusters, glue=glue, products=products,
                           learner=learner, params=params, placement=placement, backend=backend, seed=seed,
                           partition=partition_options(scheme, label_to, shared, overlap, regions, band),
                           centralized=not no_centralized, timeout=timeout, min_clients=min_clients,
                           align=align, smoothing=smoothing,
                           refine_passes=refine_passes, cluster_fit=cluster_fit).check(fcdt=fcdt)  # (before any data)
    outputs = prepare_outputs(out, force, json=json_out)
    ds = load(dataset, data_dir, seed, rows, label, schema, missing, test_size)
    if fcdt:
        from fedpgm.fedpc.experiment import run_fcdt

        with outputs:
            _, report = run_fcdt(ds, settings, out)
            finish("fedpc fit", report, json_out)
        console.print(f"{report['combine']} root over the {report['ensemble']} experts of "
                      f"{report['clients_with_trees']}")
        if report["single_class_clients"]:
            console.print(f"note: clients {report['single_class_clients']} hold one class only, so their experts "
                          "cannot tell classes apart; with label-skewed clients FC[PC] (generative) can")
    else:
        with outputs:
            _, report = run_with_progress(ds, settings, out)
            finish("fedpc fit", report, json_out)
        console.print(f"plan: {report['plan']}")
        if report.get("glue") == "aligned":
            console.print(f"gluing: aligned, {report['clusters']} clusters per client, their tuples modelled by "
                          f"{report['tuple_model']['described']}; the server learned {report['shared_with_server']}")
    for client, why in report.get("left_out", {}).items():
        console.print(f"[yellow]left out: {client}[/] ({why})")
    if out is not None:
        console.print(f"saved the model to {out}")


def load_saved(model_dir: Path):
    """The model a ``fedpgm fedpc fit --out`` folder holds: an FC[DT] ``TreeCircuit`` when it has
    ``trees.json``, else a ``FedPC``."""
    from fedpgm.fedpc.model import FedPC
    from fedpgm.fedpc.trees import TreeCircuit

    return TreeCircuit.load(model_dir) if (model_dir / "trees.json").is_file() else FedPC.load(model_dir)


@fedpc_app.command("evaluate")
def evaluate(
    model_dir: Path,
    dataset: str,
    seed: Seed = 0,
    json_out: JsonOut = None,
    data_dir: DataDir = None, rows: Rows = None, label: Label = None, schema: SchemaFile = None,
    missing: Missing = None, test_size: TestSize = None, keep: Keep = None,
) -> None:
    """Test log-likelihood (and accuracy/F1 with a label) of a saved FedPC, or accuracy/F1 of a
    saved FC[DT], on DATASET's test split."""
    from fedpgm.data import images
    from fedpgm.fedpc.experiment import evaluate as scores
    from fedpgm.metrics import classification

    prepare_outputs(json=json_out)

    model = load_saved(model_dir)
    ds = load(dataset, data_dir, seed, rows, label, schema, missing, test_size)
    missing_cols = [n for n in model.schema.names if n not in ds.test.columns]
    if missing_cols:
        raise FedpgmError(f"{dataset} lacks the model's column(s) {missing_cols}; evaluate on the data it "
                          "was fitted on")
    if model.density and ds.schema.label is not None and ds.schema.label not in model.schema:
        ds = ds.drop_label()  # a model of the features alone (dense image circuits)
    report = {"dataset": ds.name, "model": str(model_dir), "n_test": len(ds.test)}
    if not model.density:  # (FC[DT]: a classifier)
        report |= classification(model.predict_proba(ds.test), ds.test[model.label].to_numpy(dtype=float))
    else:
        label_name = model.schema.label if model.schema.label in ds.test.columns else None
        proba = model.predict_proba(ds.test, label_name) if label_name else None
        report |= scores(model.log_likelihood(ds.test), proba, ds)
        if images.layout(model.schema) is not None and images.levels(model.schema) is not None:
            report["test_bpd"] = images.bits_per_dim(report["test_loglik"], len(model.schema))
    finish("fedpc evaluate", report, json_out, settings={"model": str(model_dir), "seed": seed})


@fedpc_app.command("query")
def query(
    model_dir: Path,
    evidence: Evidence,
    query: QueryColumns = None,
    target: Target = None,
    mpe: Mpe = False,
    out: AnswersOut = None,
) -> None:
    """Marginal (default), conditional, classification or MPE queries on a saved FedPC;
    classification (--target LABEL) on a saved FC[DT]."""
    model = load_saved(model_dir)
    if not model.density and target is None:
        raise FedpgmError(f"{model_dir} holds an FC[DT] classifier; ask it with --target {model.label}")
    answer_queries(model, model.schema, evidence, query, target, mpe, out)


DEMO_SETTINGS: tuple[tuple[str, int, dict, str, int], ...] = (  # (split, clients, options, gluing, clusters)
    ("horizontal", 5, {"scheme": "label-skew"}, "-", 2),
    ("vertical", 2, {}, "random", 2),
    ("vertical", 2, {}, "aligned", 8),
    ("hybrid", 2, {}, "random", 2),
    ("hybrid", 2, {}, "aligned", 8),
)


def demo() -> None:
    """The main job: FedPC on breast cancer across horizontal, vertical and hybrid federations,
    with the paper's random gluing and with aligned gluing (docs/fedpc.md, Table 1)."""
    from fedpgm.fedpc.experiment import FitSettings

    ds = load("breast_cancer", None, 0)
    table = Table(title=f"FedPC on {ds.name} ({len(ds.train)} train / {len(ds.test)} test rows; "
                        "LL = test log-likelihood, nats per row)", box=box.SIMPLE, padding=(0, 1),
                  pad_edge=False)
    for col in ("federation", "gluing K", "LL cent.", "LL fed.", "accuracy", "rel. time", "sent kB"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for split, k, opts, glue, clusters in DEMO_SETTINGS:
        settings = FitSettings(split=split, clients=k, partition=opts, clusters=clusters, smoothing=0.0,
                               glue="random" if glue == "-" else glue, refine_passes=0,
                               params={"min_instances_slice": 20})  # fixed, not adapted (the paper's one pass)
        _, r = run_with_progress(ds, settings, None)
        table.add_row(f"{split} x{k}", glue if glue == "-" else f"{glue} {clusters}",
                      f"{r['centralized_test_loglik']:.3f}", f"{r['test_loglik']:.3f}",
                      f"{r['accuracy']:.3f}", f"{r['relative_runtime']:.2f}",
                      f"{(r['bytes_up'] + r['bytes_down']) / 1000:.1f}")
    console.print(table)
    console.print("rel. time = (slowest client + server) / centralized LearnSPN; CPU seconds, one thread each.\n"
                  "aligned 8: a masked sum tells the server how often the clients' clusters co-occur (no row's "
                  "cluster, no data), so it can weight cluster pairs by it; random 2 is Algorithm 1's gluing (the "
                  "paper's Table 4 runs used combinatorial).")
