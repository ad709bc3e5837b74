"""What the ``fedpgm`` command line's groups share: the console, common options, dataset
loading, answering queries on a saved model, and printing or writing a table.

It imports no command group, so any group (``fedpgm.fedpc.cli``, ``fedpgm.ngm.cli``, ...) can
be imported first.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Callable, Iterator, Optional

import click
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from fedpgm.errors import FedpgmError
from fedpgm.federation.apps import BACKEND_HELP

console = Console()

# The values of the CLI's enumerated options: shown in --help, anything else refused with exit 2
# before any work. Each is the library's own constant (named beside it), written here so that
# the CLI starts without importing the library; tests/test_cli.py checks each against its source.
CHOICES = {
    "split": ("horizontal", "vertical", "hybrid"),  # fedpgm.data.partition.SPLITS
    "scheme": ("iid", "label-skew", "dirichlet"),  # fedpgm.data.partition.HORIZONTAL_SCHEMES
    "backend": ("inprocess", "flower", "simulation"),  # fedpgm.federation.apps.BACKENDS
    "glue": ("auto", "random", "combinatorial", "aligned"),  # "auto" and fedpgm.fedpc.plan.GLUES
    "cluster_fit": ("learn", "refit"),  # fedpgm.fedpc.defaults.CLUSTER_FITS
    "placement": ("server", "split"),  # fedpgm.fedpc.server.PLACEMENTS
    "align": ("none", "psi"),  # fedpgm.federation.psi.ALIGNMENTS
    "tree_root": ("auto", "mean", "product"),  # fedpgm.fedpc.trees.COMBINES
    "ensemble": ("bagging", "boosting"),  # fedpgm.fedpc.experts.ENSEMBLES
    "leaf": ("gaussian", "histogram"),  # fedpgm.circuits.leaves.CONTINUOUS_LEAVES
    "leaf_model": ("univariate", "chow-liu", "latent-tree"),  # fedpgm.circuits.learnspn.LEAF_MODELS
    "missing": ("keep", "impute"),  # fedpgm.data.dataset.MISSING_POLICIES
    "graph": ("glasso", "bn", "ngr"),  # fedpgm.ngm.graph.GRAPH_METHODS
    "ngm_mode": ("direct", "iterative"),  # fedpgm.ngm.model.MODES
    "model": ("cbm", "cem", "cgm", "c2bm", "opaque"),  # fedpgm.concepts.models.KINDS
    "regime": ("centralized", "local", "static", "fcm", "reinit"),  # fedpgm.concepts.federation.REGIMES
    "dp_scope": ("training", "update"),  # fedpgm.concepts.privacy.DP_SCOPES
    "protocol": ("project", "paper"),  # fedpgm.concepts.experiment.PROTOCOLS
    "select": ("validation",),  # fedpgm.circuits.selection.SELECTIONS
    "structure": ("pd", "quad-tree", "binary-trees"),  # fedpgm.circuits.region_graph.STRUCTURES
    "inputs": ("gaussian", "categorical", "bernoulli"),  # fedpgm.circuits.dense_inputs.INPUTS
    "train": ("online", "batch", "adam"),  # fedpgm.circuits.dense_train.METHODS
    "device": ("auto", "cpu", "cuda"),  # fedpgm.circuits.dense_estimator.DEVICES
    "regions": ("halves", "quadrants"),  # fedpgm.data.images.IMAGE_SPLITS
    "hide": ("bottom", "right", "centre"),  # fedpgm.data.images.HIDE
    "how": ("sample", "max"),  # fedpgm.circuits.dense.SELECTIONS
}


def one_of(name: str) -> click.Choice:
    """The click type of an enumerated option (``CHOICES[name]``)."""
    return click.Choice(CHOICES[name])
log_console = Console(stderr=True, highlight=False)  # progress lines when there is no terminal


@contextmanager
def stages(text: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """Progress of a long command, updated by ``update(description=..., completed=...)``: on a
    terminal a spinner (or a bar out of ``total`` with the time left at the pace so far) and the
    elapsed time; without one (a log file, CI) one line per update on stderr, with the seconds
    since the start and, out of ``total``, the most seconds left at that pace (early stopping can
    end sooner)."""
    if console.is_terminal:
        head = ([SpinnerColumn(), TextColumn("{task.description}")] if total is None else
                [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                 TextColumn("left at most"), TimeRemainingColumn()])
        with Progress(*head, TimeElapsedColumn(), console=console, transient=True) as bar:
            task = bar.add_task(text, total=total)
            yield lambda description=None, completed=None: bar.update(task, description=description,
                                                                      completed=completed)
        return
    start, current = time.perf_counter(), [text]  # the description stays until updated, as on a terminal

    def line(description: str | None = None, completed: int | None = None) -> None:
        current[0] = description or current[0]
        elapsed = time.perf_counter() - start
        count = ""
        if completed is not None and total:
            left = elapsed / completed * (total - completed) if completed > 0 else None
            count = f" ({completed}/{total}" + (f"; at most {left:.0f} s left at this pace)" if left is not None
                                                else ")")
        log_console.print(f"[{elapsed:7.1f} s] {current[0]}{count}", markup=False, soft_wrap=True)  # one line each

    line()
    yield line

DataDir = Annotated[Optional[Path], typer.Option(
    "--data-dir", help="Folder with adult/, give_me_some_credit/, debd/ (default: $FEDPGM_DATA "
    "or ../shared/data)")]
Seed = Annotated[int, typer.Option("--seed", min=0, max=2**32 - 1,
                                   help="Seed for splits, sampling and partitioning")]
Rows = Annotated[Optional[int], typer.Option("--rows", help="Rows to draw (bn: and synthetic: sets)")]
Label = Annotated[Optional[str], typer.Option("--label", help="Label column (csv:, bn:)")]
SchemaFile = Annotated[Optional[Path], typer.Option("--schema", help="Schema JSON for csv: sets")]
Missing = Annotated[Optional[str], typer.Option("--missing", help="Missing values: keep or impute",
                                               click_type=one_of("missing"))]
TestSize = Annotated[Optional[float], typer.Option("--test-size", help="Test fraction (random splits)")]
Keep = Annotated[Optional[list[str]], typer.Option("--keep", help="csv: model this column even if it looks like a "
                                                   "row id (repeatable)")]
# query options shared by every saved-model `query` command (see answer_queries)
Evidence = Annotated[Path, typer.Option(help="CSV of rows; absent or empty cells are unobserved")]
QueryColumns = Annotated[Optional[str], typer.Option("--query", help="comma-separated query columns: "
                                                     "log p(Q | rest)")]
Target = Annotated[Optional[str], typer.Option(help="discrete column: p(target = each state | rest)")]
Mpe = Annotated[bool, typer.Option(help="complete the unobserved cells by max-product")]
Timeout = Annotated[float, typer.Option("--timeout", help="Seconds each exchange with the clients may take; a "
                                        "client that overruns is reported by name")]
AnswersOut = Annotated[Optional[Path], typer.Option("--out", help="Write the answers CSV here (default stdout)")]
Force = Annotated[bool, typer.Option("--force", help="Replace a non-empty --out folder")]
Backend = Annotated[str, typer.Option(help=BACKEND_HELP, click_type=one_of("backend"))]


def prepare_outputs(folder: Path | None = None, force: bool = False, **files: Path | None):
    """Check every output path before any work (``folder``: the ``--out`` folder; ``files``: by
    option name, e.g. ``json=...``, ``plot=...``) and return the context in which the folder may
    be replaced (``--force``); without it an existing non-empty folder is refused."""
    from fedpgm.files import check_output_file, check_output_folder, replacing

    check_output_folder(folder, force)
    for option, path in files.items():
        check_output_file(path, f"--{option}")
    return replacing(folder if force else None)


def check_timeout(timeout: float) -> float:
    if not timeout > 0:
        raise FedpgmError(f"--timeout must be > 0 seconds, got {timeout}")
    return float(timeout)


def load(dataset: str, data_dir, seed, rows=None, label=None, schema=None, missing=None,
         test_size=None, keep=None):
    """Load a dataset with the command's options; ``keep`` defaults to the running command's
    ``--keep`` (so a command only declares ``keep: Keep = None``)."""
    from fedpgm.data import load_dataset

    ctx = click.get_current_context(silent=True)
    if keep is None and ctx is not None:
        keep = ctx.params.get("keep")
    return load_dataset(dataset, data_dir=data_dir, seed=seed, rows=rows, label=label,
                        schema=schema, missing=missing, test_size=test_size, keep=keep)


def answer_queries(model, sch, evidence: Path, query: str | None, target: str | None, mpe: bool,
                   out: Path | None) -> None:
    """Marginal (default), conditional, class-probability or MPE answers for each evidence row;
    ``model`` is anything with the estimator query API (a circuit estimator, a FedPC)."""
    import pandas as pd

    from fedpgm.data.loaders import read_csv_file

    if sum(x is not None and x is not False for x in (query, target, mpe or None)) > 1:
        raise FedpgmError("choose one of --query, --target and --mpe")
    raw = read_csv_file(evidence)
    frame = sch.select(raw.columns).encode(raw, str(evidence))
    if target is not None:
        proba = model.predict_proba(frame, target)
        answer = pd.DataFrame(proba, index=frame.index,
                              columns=[f"p({target}={c})" for c in sch[target].categories])
    elif query is not None:
        names = [q.strip() for q in query.split(",") if q.strip()]
        answer = pd.DataFrame({"log_p_query_given_evidence": model.conditional(frame, names)},
                              index=frame.index)
    elif mpe:
        answer = sch.decode(pd.DataFrame(model.mpe(frame), index=frame.index, columns=sch.names))
    else:
        answer = pd.DataFrame({"log_likelihood": model.log_likelihood(frame)}, index=frame.index)
    write_table(answer, out, "answers")


def write_table(table, out: Path | None, what: str = "rows", index: bool = True) -> None:
    """A DataFrame as CSV on stdout, or into ``out`` with a one-line note."""
    text = table.to_csv(float_format="%.10g", index=index)
    if out is None:
        print(text, end="")
    else:
        out.write_text(text)
        console.print(f"wrote {len(table)} {what} to {out}")


def finish(command: str, result: dict | list, json_out: Path | None = None, *, settings: dict | None = None,
           dataset: str | None = None, runs: dict | None = None, show: bool = True) -> dict:
    """``result`` as a report in the one schema (``fedpgm.report``): written to ``json_out``
    (atomically) and, with ``show``, printed as the one table. Returns the report."""
    from fedpgm.files import write_json
    from fedpgm.report import make_report, render

    report = make_report(command, result, dataset=dataset, settings=settings, runs=runs)
    if json_out is not None:
        write_json(report, json_out)
    if show:
        render(report, console)
    return report


LeafModel = Annotated[str, typer.Option(help="LearnSPN: a slice that stops splitting is modelled by univariate "
                                             "leaves, by a Chow-Liu tree over its discrete variables (ID-SPN "
                                             "style) or by a latent Chow-Liu tree (HCLT; give it --em-iterations)",
                                        click_type=one_of("leaf_model"))]
LatentStates = Annotated[int, typer.Option(help="LearnSPN: hidden states per variable of --leaf-model latent-tree",
                                           min=1)]
EmBatchSize = Annotated[Optional[int], typer.Option(
    help="LearnSPN: EM passes as stepwise EM over mini-batches of this many rows (default: batch EM)", min=1)]
Alpha = Annotated[float, typer.Option(help="LearnSPN: the leaves' pseudo-count per state or bin (Laplace "
                                          "smoothing)")]
RowClusters = Annotated[int, typer.Option("--row-clusters", help="LearnSPN: parts per row split (k-means' k)")]
EmIterations = Annotated[Optional[int], typer.Option(
    help="EM passes over the training rows: RAT-SPN's training (default 20), or LearnSPN's refinement of the "
         "learned circuit's parameters (default 0)", min=0)]


def em_passes(learner: str, em_iterations: int | None) -> int:
    """--em-iterations, or the learner's own default (RAT-SPN trains by EM; LearnSPN counts); 0
    for a learner without EM passes (fedpc fit's tree too)."""
    from fedpgm.circuits.learners import LEARNERS

    if em_iterations is not None:
        return em_iterations
    spec = LEARNERS.get(learner)
    return (spec.default("em_iterations") if spec else None) or 0


# Dense circuits (learner pd, fedpgm.circuits.dense_estimator.DensePC): the defaults are the FedPC
# paper's MNIST settings (Appendix E, Table 5).
Structure = Annotated[str, typer.Option(help="pd: region graph (pd = Poon-Domingos, quad-tree, binary-trees = "
                                             "RAT-SPN's)", click_type=one_of("structure"))]
Units = Annotated[int, typer.Option(help="pd: units K per region", min=1)]
Pieces = Annotated[int, typer.Option(help="pd: Poon-Domingos cells per image side", min=1)]
Inputs = Annotated[str, typer.Option(help="pd: input distributions (gaussian: variance in [1e-3, 0.25] on "
                                          "values scaled to [0, 1], masses of pixel bins reported)",
                                     click_type=one_of("inputs"))]
Epochs = Annotated[int, typer.Option(help="pd: training epochs", min=1)]
TrainMethod = Annotated[str, typer.Option("--train", help="pd: online EM (EiNet's, frequency 5, step 0.1), "
                                                          "batch EM, or adam", click_type=one_of("train"))]
BatchSize = Annotated[int, typer.Option(help="pd: rows per mini-batch", min=1)]
Device = Annotated[str, typer.Option(help="pd: auto (CUDA when torch sees a GPU), cpu or cuda",
                                     click_type=one_of("device"))]


def dense_params(structure: str, units: int, pieces: int, inputs: str, epochs: int, train: str, batch_size: int,
                 device: str, seed: int) -> dict:
    """``DensePC`` parameters from the CLI's dense-circuit options."""
    return {"structure": structure, "units": units, "pieces": pieces, "leaf": inputs, "epochs": epochs,
            "method": train, "batch_size": batch_size, "device": device, "seed": seed}
