"""Images as tables: pixel columns, MNIST's IDX files, splits by image region, bits per dimension.

An image dataset is a table whose feature columns are named ``pixel_ROW_COL`` (scikit-learn's
digits already are); the schema gives the pixel values' range (``pixel_levels``, or the
categories of ordinal pixel columns), and any set of pixel columns forming a rectangle is an
image of its own (a client's region of a vertical split, say): ``layout`` finds its shape.

``read_idx`` reads MNIST's distribution format (magic 0x00000803 for images, 0x00000801 for
labels, big-endian sizes, uint8 values; gzip or not) and checks every header field and the
file's length; ``mnist:PATH`` loads the four files of a folder, ``mnist5k`` the 5,000-digit copy
in the data directory.
"""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np

from fedpgm.data.dataset import Dataset, table
from fedpgm.data.registry import LoadOptions, register, resolve_data_dir
from fedpgm.data.schema import Feature, Schema
from fedpgm.errors import FedpgmError

PIXEL = re.compile(r"pixel_(\d+)_(\d+)$")
MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
IMAGE_SPLITS = ("halves", "quadrants")


def pixel_name(row: int, col: int) -> str:
    return f"pixel_{row}_{col}"


def layout(schema: Schema) -> tuple[tuple[int, int], list[int]] | None:
    """((H, W), schema index of each pixel in row-major order) when the feature columns (the
    label aside) are pixels filling a rectangle of rows x columns, else None."""
    names = schema.feature_names
    coords = [PIXEL.match(n) for n in names]
    if not names or not all(coords):
        return None
    rc = [(int(m.group(1)), int(m.group(2))) for m in coords if m is not None]
    rows, cols = sorted({r for r, _ in rc}), sorted({c for _, c in rc})
    if len(rc) != len(rows) * len(cols):
        return None
    where = {p: schema.index(n) for p, n in zip(rc, names)}
    return (len(rows), len(cols)), [where[(r, c)] for r in rows for c in cols]


def levels(schema: Schema) -> int | None:
    """Number of pixel values (256 for 8-bit images), or None for a table that is no image."""
    if schema.pixel_levels is not None:
        return schema.pixel_levels
    cards = {f.cardinality for f in schema.features if f.name != schema.label and PIXEL.match(f.name)}
    return cards.pop() if len(cards) == 1 and 0 not in cards else None


def bits_per_dim(loglik: np.ndarray | float, n_pixels: int) -> float:
    """Mean bits per pixel of per-image log-probabilities (nats)."""
    return float(-np.mean(loglik) / (n_pixels * math.log(2)))


def region_groups(schema: Schema, how: str, band: int = 0) -> list[list[str]]:
    """Pixel columns split by image region: ``halves`` (left | right) or ``quadrants``; with
    ``band`` > 0 neighbouring regions overlap by ``band`` pixels on each side of every cut (the
    hybrid split's shared columns)."""
    found = layout(schema)
    if found is None:
        raise FedpgmError("splitting by image region needs pixel columns named pixel_ROW_COL forming a rectangle")
    (h, w), order = found
    if how not in IMAGE_SPLITS:
        raise FedpgmError(f"unknown image split '{how}'; use one of {', '.join(IMAGE_SPLITS)}")
    cuts_r = [0, h] if how == "halves" else [0, h // 2, h]
    cuts_c = [0, w // 2, w]
    if min(h, w) < 2:
        raise FedpgmError(f"an image of {h} x {w} pixels cannot be split into {how}")
    if band < 0 or band >= w // 2 or (how == "quadrants" and band >= h // 2):  # each keeps a private part
        raise FedpgmError(f"an overlap band of {band} pixels does not fit a {h} x {w} image split into {how}")
    names = schema.names

    def spans(cuts: list[int], n: int) -> list[tuple[int, int]]:
        return [(max(0, a - band), min(n, b + band)) for a, b in zip(cuts, cuts[1:])]

    return [[names[order[r * w + c]] for r in range(r0, r1) for c in range(c0, c1)]
            for r0, r1 in spans(cuts_r, h) for c0, c1 in spans(cuts_c, w)]


def read_idx(path: Path, magic: int) -> np.ndarray:
    """An IDX file's uint8 array (gzip or not); a wrong magic number or a short file is an error."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise FedpgmError(f"cannot read {path} ({e}); MNIST files are IDX, optionally gzipped") from None
    if len(raw) < 4 or int.from_bytes(raw[:4], "big") != magic:
        found = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
        raise FedpgmError(f"{path} is not an IDX file of the expected kind (magic number "
                          f"{found if found is None else hex(found)}, expected {hex(magic)})")
    dims = magic & 0xFF
    head = 4 + 4 * dims
    if len(raw) < head:
        raise FedpgmError(f"{path} is truncated: its header ends early")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    size = int(np.prod(shape))
    if len(raw) != head + size:
        raise FedpgmError(f"{path} holds {len(raw) - head} values where its header says {shape} = {size}; "
                          "the file is truncated or corrupt")
    return np.frombuffer(raw, dtype=np.uint8, offset=head).reshape(shape)


def find_file(folder: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    raise FedpgmError(f"{folder} has no {stem} (or {stem}.gz); an MNIST folder holds the four IDX files "
                      f"{', '.join(f for pair in MNIST_FILES.values() for f in pair)}")


def load_mnist_folder(folder: Path, name: str, options: LoadOptions) -> Dataset:
    if not folder.is_dir():
        raise FedpgmError(f"MNIST folder {folder} does not exist; pass mnist:PATH to the folder of the four IDX files")
    parts = {}
    for part, (images, labels) in MNIST_FILES.items():
        x = read_idx(find_file(folder, images), 0x00000803)
        y = read_idx(find_file(folder, labels), 0x00000801)
        if len(x) != len(y):
            raise FedpgmError(f"{folder}: {part} has {len(x)} images but {len(y)} labels")
        if x.ndim != 3:
            raise FedpgmError(f"{folder}: {part} images have shape {x.shape}, expected (n, rows, cols)")
        parts[part] = (x.reshape(len(x), -1), y)
    shapes = {read_idx(find_file(folder, MNIST_FILES[p][0]), 0x803).shape[1:] for p in MNIST_FILES}
    if len(shapes) != 1:
        raise FedpgmError(f"{folder}: train and test images differ in shape {sorted(shapes)}")
    h, w = shapes.pop()
    classes = tuple(str(c) for c in range(10))
    schema = Schema(tuple(Feature(pixel_name(r, c), "continuous") for r in range(h) for c in range(w))
                    + (Feature("target", "categorical", classes),), "target", pixel_levels=256)
    if options.rows is not None:
        parts["train"] = (parts["train"][0][:options.rows], parts["train"][1][:options.rows])
    frames, start = {}, 0
    for part, (x, y) in parts.items():
        if (y > 9).any():
            raise FedpgmError(f"{folder}: {part} labels hold {int(y.max())}; MNIST labels are digits 0-9")
        frames[part] = table(np.column_stack([x, y]).astype(float), schema.names, np.arange(start, start + len(x)))
        start += len(x)
    return Dataset(name, schema, frames["train"], frames["test"],
                   info={"split": "official train / t10k files", "missing": "none", "source": str(folder),
                         "image": f"{h}x{w}, 256 levels"})


@register("mnist", "MNIST in its IDX files: mnist:PATH (folder with train-images-idx3-ubyte[.gz], "
          "train-labels-idx1-ubyte[.gz], t10k-...)", family=True, options=("rows",))
def load_mnist(arg: str, options: LoadOptions) -> Dataset:
    return load_mnist_folder(Path(arg), f"mnist:{Path(arg).name}", options)


@register("mnist5k", "5,000 real MNIST digits (4,000 train, 1,000 test) in DATA/mnist5k, IDX format",
          options=("rows",), files=("mnist5k/train-images-idx3-ubyte.gz",))
def load_mnist5k(_: str | None, options: LoadOptions) -> Dataset:
    return load_mnist_folder(resolve_data_dir(options) / "mnist5k", "mnist5k", options)


HIDE = ("bottom", "right", "centre")


def hide_pixels(x: np.ndarray, schema: Schema, hide: str) -> np.ndarray:
    """(rows, columns) copy of ``x`` (schema order) with the ``bottom`` half, ``right`` half or a
    ``centre`` square (half the side) of every image set to NaN (missing)."""
    found = layout(schema)
    if found is None:
        raise FedpgmError("hiding pixels needs an image schema (pixel_ROW_COL columns forming a rectangle)")
    if hide not in HIDE:
        raise FedpgmError(f"unknown region to hide '{hide}'; use one of {', '.join(HIDE)}")
    (h, w), order = found
    r, c = np.divmod(np.arange(h * w), w)
    mask = {"bottom": r >= h // 2, "right": c >= w // 2,
            "centre": (abs(r - (h - 1) / 2) < h / 4) & (abs(c - (w - 1) / 2) < w / 4)}[hide]
    out = np.array(x, dtype=float, copy=True)
    out[:, np.asarray(order)[mask]] = np.nan
    return out


def save_grid(x: np.ndarray, schema: Schema, path, title: str = "", rows: int | None = None, zoom: int = 4) -> None:
    """Images (rows of ``x`` in schema order) tiled into one grey-scale PNG, written atomically;
    ``rows``: grid rows (default: about square). ``title`` names the PNG's content in its metadata."""
    import os
    import tempfile

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image

    found = layout(schema)
    if found is None:
        raise FedpgmError("an image grid needs an image schema (pixel_ROW_COL columns forming a rectangle)")
    (h, w), order = found
    n = len(x)
    rows = rows or max(1, int(math.floor(math.sqrt(n))))
    cols = int(math.ceil(n / rows))
    top = (levels(schema) or 256) - 1
    grid = np.full((rows * (h + 1) + 1, cols * (w + 1) + 1), top / 2, dtype=float)
    for i, image in enumerate(np.asarray(x, dtype=float)[:, order].reshape(n, h, w)):
        r, c = divmod(i, cols)
        grid[1 + r * (h + 1): 1 + r * (h + 1) + h, 1 + c * (w + 1): 1 + c * (w + 1) + w] = image
    grid = np.kron(np.nan_to_num(grid), np.ones((zoom, zoom)))
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".grid-", suffix=".png", dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        matplotlib.image.imsave(tmp, grid, cmap="gray", vmin=0, vmax=top, metadata={"Title": title})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
