"""An NGM's model document (``model.json``), checked field by field before anything is allocated:
a file a user hands us is untrusted input (``fedpgm.model_files``)."""

from __future__ import annotations

from dataclasses import fields

from fedpgm.model_files import SEAL, BadModelFile, check_keys, need, need_float, need_list, schema_of
from fedpgm.errors import FedpgmError
from fedpgm.ngm.params import PARAMETERS
from fedpgm.params import check_values
from fedpgm.ngm.layout import Layout, numeric
from fedpgm.ngm.train import NGMSettings

FULL = ""  # residuals given every other feature (no feature name is empty)


DOC_KEYS = ("format", "layout", "edges", "widths", "settings", "residuals")
SETTING_TYPES = {"int": int, "float": float, "bool": bool}
MAX_WIDTH = 2 ** 20


def check_document(doc: dict, where: str) -> tuple[Layout, list[int]]:
    """The layout and widths of an NGM document whose every field has its type and range."""
    check_keys(doc, where, "document", DOC_KEYS, ("weights", "meta", SEAL))
    layout = layout_of(doc["layout"], where)
    widths = need_list(doc["widths"], where, "widths", int)
    if len(widths) < 2 or any(not 1 <= w <= MAX_WIDTH for w in widths):
        raise BadModelFile(f"{where}: field 'widths' must list at least 2 sizes 1..{MAX_WIDTH}")
    settings = check_keys(doc["settings"], where, "settings", (), [f.name for f in fields(NGMSettings)])
    for f in fields(NGMSettings):
        if f.name in settings:
            need(settings[f.name], SETTING_TYPES[str(f.type)], where, f"settings.{f.name}")
    for i, e in enumerate(need_list(doc["edges"], where, "edges", list)):
        need_list(e, where, f"edges[{i}]", str, 2)
    residuals = check_keys(doc["residuals"], where, "residuals", (FULL,), layout.schema.names)
    for start, by in residuals.items():
        for name, values in check_keys(by, where, f"residuals.{start}", (), layout.schema.names).items():
            quantile_list(values, where, f"residuals.{start}.{name}")
    return layout, widths


def layout_of(doc, where: str) -> Layout:
    """The layout: its schema, and per feature the statistics sampling and encoding read."""
    check_keys(doc, where, "layout", ("schema", "stats"))
    schema = schema_of(doc["schema"], where, "layout.schema")
    stats = check_keys(doc["stats"], where, "layout.stats", schema.names)
    for f in schema.features:
        name = f"layout.stats.{f.name}"
        if numeric(f):
            s = check_keys(stats[f.name], where, name, ("mean", "std", "quantiles"))
            need_float(s["mean"], where, f"{name}.mean")
            need_float(s["std"], where, f"{name}.std", 1e-300)
            quantile_list(s["quantiles"], where, f"{name}.quantiles")
            continue
        freq = need_list(check_keys(stats[f.name], where, name, ("freq",))["freq"], where, f"{name}.freq",
                         float, f.cardinality)
        if any(need_float(p, where, f"{name}.freq", 0.0, 1.0) < 0 for p in freq) or abs(sum(freq) - 1) > 1e-6:
            raise BadModelFile(f"{where}: field '{name}.freq' must be probabilities summing to 1")
    try:
        return Layout.from_dict(doc)
    except FedpgmError as e:
        raise BadModelFile(f"{where}: field 'layout': {e}") from None


def quantile_list(values, where: str, name: str) -> None:
    """A quantile function: 1 to ``MAX_QUANTILES`` finite numbers."""
    from fedpgm.ngm.layout import MAX_QUANTILES

    if not 1 <= len(need_list(values, where, name, float)) <= MAX_QUANTILES:
        raise BadModelFile(f"{where}: field '{name}' must hold 1 to {MAX_QUANTILES} numbers")
    for x in values:
        need_float(x, where, name)


def check_meta(meta, where: str) -> dict:
    """``meta`` is an object; its ``estimator`` (if any) holds valid ``FederatedNGM`` parameters
    and its ``info`` (if any) is an object."""
    need(meta, dict, where, "meta", "an object")
    if "info" in meta:
        need(meta["info"], dict, where, "meta.info", "an object")
    if "estimator" in meta:
        params = need(meta["estimator"], dict, where, "meta.estimator", "an object")
        try:
            check_values(PARAMETERS, params, "FederatedNGM")
        except FedpgmError as e:
            raise BadModelFile(f"{where}: field 'meta.estimator' is not valid for FederatedNGM: "
                               f"{str(e)[:300]}") from None
    return meta
