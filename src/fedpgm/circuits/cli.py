"""``fedpgm pc``: learn, save, query, sample and inpaint with one probabilistic circuit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from fedpgm.cli_common import (Alpha, AnswersOut, BatchSize, DataDir, Device, EmBatchSize, EmIterations, Epochs,
                               Evidence, Force, Inputs, Keep, Label, LatentStates, LeafModel, Missing, Mpe, Pieces,
                               QueryColumns, RowClusters, Rows, SchemaFile, Seed, Structure, Target, TestSize,
                               TrainMethod, Units, answer_queries, console, dense_params, em_passes, finish, load,
                               one_of, prepare_outputs, stages)
from fedpgm.errors import FedpgmError

pc_app = typer.Typer(no_args_is_help=True, help="Probabilistic circuits: learn, save, query.")


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

    from fedpgm.circuits.estimator import LearnSPN
    from fedpgm.circuits.learners import learner_spec
    from fedpgm.data.images import bits_per_dim

    spec = learner_spec(learner)
    if min_instances < 1:
        raise FedpgmError(f"--min-instances must be >= 1, got {min_instances}")
    if select is not None and spec.estimator is not LearnSPN:
        raise FedpgmError("--select chooses LearnSPN's settings; use it with --learner learnspn")
    dense = spec.dense
    node_options = {"min_instances_slice": min_instances, "threshold": threshold, "leaf": leaf,
                    "leaf_model": leaf_model, "alpha": alpha, "row_clusters": row_clusters,
                    "em_iterations": em_passes(learner, em_iterations), "seed": seed, "latent_states": latent_states,
                    "em_batch_size": em_batch_size, "budget_s": budget_s, "depth": depth, "repetitions": repetitions}
    params = (dense_params(structure, units, pieces, inputs, epochs, train, batch_size, device, seed) if dense else
              spec.settings(node_options))
    model: Any = spec.estimator(**params).check_params()  # a bad setting is refused before the data is read
    outputs = prepare_outputs(out, force, json=json_out)
    ds = load(dataset, data_dir, seed, rows, label, schema, missing, test_size)
    if not spec.takes_label:
        ds = ds.drop_label()
    if dense:
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
    if ds.schema.label is not None and spec.takes_label:  # the label's test accuracy, macro-F1 (and F1 if binary)
        from fedpgm.metrics import classification

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
