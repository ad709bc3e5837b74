"""Region graphs: the structures dense (tensorized) circuits are built from.

A region is a set of variables; a partition splits a region into two disjoint regions whose
union it is. A circuit made from a region graph (``fedpgm.circuits.dense``) gives every region
K units and every partition K x K products, so the structure is a handful of index arrays.

- ``poon_domingos(shape, pieces)``: the Poon-Domingos architecture (as in EiNets): an H x W image
  is cut into ``pieces`` x ``pieces`` cells (boundaries at rounded multiples of H / pieces); every
  rectangle of cells is a region, split in two along every interior cell boundary; the cells
  are the leaf regions, each pixel in exactly one.
- ``quad_tree(shape)``: each rectangle split in halves along its longer side, down to pixels.
- ``binary_trees(n, depth, repetitions, seed)``: RAT-SPN's random region graph: per repetition a
  random order of the variables halved ``depth`` times; the repetitions share only the root.

Variables are indices 0..n-1 (for images, pixel (r, c) is ``r * W + c``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpgm.errors import FedpgmError

STRUCTURES = ("pd", "quad-tree", "binary-trees")


@dataclass
class RegionGraph:
    """``regions[i]``: sorted variables; ``partitions[j]``: (parent, left, right) region indices."""

    regions: list[tuple[int, ...]]
    partitions: list[tuple[int, int, int]]
    root: int

    @property
    def n_vars(self) -> int:
        return len(self.regions[self.root])

    def leaves(self) -> list[int]:
        parents = {p for p, _, _ in self.partitions}
        return [i for i in range(len(self.regions)) if i not in parents]

    def depths(self) -> tuple[np.ndarray, np.ndarray]:
        """(regions,) and (partitions,) depths: leaf regions 0, a partition one more than its
        deeper child, a region the deepest of its partitions."""
        region_depth = np.zeros(len(self.regions), dtype=int)
        part_depth = np.zeros(len(self.partitions), dtype=int)
        by_parent: dict[int, list[int]] = {}
        for j, (p, _, _) in enumerate(self.partitions):
            by_parent.setdefault(p, []).append(j)
        done: set[int] = set()

        def visit(r: int) -> int:  # iterative enough: depth is at most ~2 log2(n) + pieces
            if r in done:
                return region_depth[r]
            d = 0
            for j in by_parent.get(r, []):
                _, a, b = self.partitions[j]
                part_depth[j] = 1 + max(visit(a), visit(b))
                d = max(d, part_depth[j])
            region_depth[r] = d
            done.add(r)
            return d

        visit(self.root)
        return region_depth, part_depth

    def check(self) -> None:
        """Every partition splits its region into two disjoint halves; every variable is covered."""
        n = len(self.regions)
        if not 0 <= self.root < n:
            raise FedpgmError("region graph: the root is not a region")
        sets = [frozenset(r) for r in self.regions]
        for p, a, b in self.partitions:
            if not (0 <= p < n and 0 <= a < n and 0 <= b < n):
                raise FedpgmError("region graph: a partition refers to an unknown region")
            # two subsets whose sizes add up to the parent's are disjoint and cover it
            if len(sets[a]) + len(sets[b]) != len(sets[p]) or not (sets[a] <= sets[p] and sets[b] <= sets[p]):
                raise FedpgmError(f"region graph: partition ({p}, {a}, {b}) does not split its region in two")
        if sorted(self.regions[self.root]) != list(range(len(self.regions[self.root]))):
            raise FedpgmError("region graph: the root must hold variables 0..n-1")

    def to_dict(self) -> dict:
        return {"regions": [list(r) for r in self.regions], "partitions": [list(p) for p in self.partitions],
                "root": self.root}

    @classmethod
    def from_dict(cls, doc: dict) -> "RegionGraph":
        try:
            graph = cls([tuple(int(v) for v in r) for r in doc["regions"]],
                        [(int(p), int(a), int(b)) for p, a, b in doc["partitions"]], int(doc["root"]))
        except (KeyError, TypeError, ValueError) as e:
            raise FedpgmError(f"region graph is malformed ({type(e).__name__}: {e})") from None
        return graph  # (checked by the circuit built on it)


class Builder:
    """Regions deduplicated by their variable set (a DAG, as PD needs)."""

    def __init__(self) -> None:
        self.regions: list[tuple[int, ...]] = []
        self.index: dict[tuple[int, ...], int] = {}
        self.partitions: list[tuple[int, int, int]] = []

    def region(self, variables, shared: bool = True) -> int:
        key = tuple(sorted(int(v) for v in variables))
        if shared and key in self.index:
            return self.index[key]
        self.regions.append(key)
        if shared:
            self.index[key] = len(self.regions) - 1
        return len(self.regions) - 1

    def graph(self, root: int) -> RegionGraph:
        """The graph (checked by the circuit built on it, as any graph is)."""
        return RegionGraph(self.regions, self.partitions, root)


def check_shape(shape) -> tuple[int, int]:
    if len(shape) != 2 or min(shape) < 1:
        raise FedpgmError(f"an image shape is (height, width) with both >= 1, got {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def pixels(rows: range, cols: range, width: int) -> list[int]:
    return [r * width + c for r in rows for c in cols]


def poon_domingos(shape, pieces: int = 8, cell: float | None = None) -> RegionGraph:
    """PD region graph of an H x W image cut into at most ``pieces`` cells per side, or with
    ``cell`` into cells of about that many pixels a side (cuts at rounded multiples of it): a
    region of a larger image keeps that image's cell size, so its circuit is a share of the
    whole image's, not another circuit of the same size."""
    h, w = check_shape(shape)
    if pieces < 1:
        raise FedpgmError(f"pd pieces must be >= 1, got {pieces}")
    if cell is not None and not cell >= 1:
        raise FedpgmError(f"a pd cell is at least one pixel wide, got {cell}")

    def cuts_of(n: int) -> np.ndarray:
        if cell is not None:
            return np.unique(np.append(np.round(np.arange(0, n, cell)).astype(int), n))
        return np.unique(np.round(np.linspace(0, n, min(pieces, n) + 1)).astype(int))

    cuts = [cuts_of(h), cuts_of(w)]
    rows, cols = cuts
    b = Builder()
    memo: dict[tuple[int, int, int, int], int] = {}

    def rect(r0: int, r1: int, c0: int, c1: int) -> int:  # indices into the cut lists
        key = (r0, r1, c0, c1)
        if key in memo:
            return memo[key]
        me = b.region(pixels(range(rows[r0], rows[r1]), range(cols[c0], cols[c1]), w))
        memo[key] = me
        for r in range(r0 + 1, r1):
            b.partitions.append((me, rect(r0, r, c0, c1), rect(r, r1, c0, c1)))
        for c in range(c0 + 1, c1):
            b.partitions.append((me, rect(r0, r1, c0, c), rect(r0, r1, c, c1)))
        return me

    root = rect(0, len(rows) - 1, 0, len(cols) - 1)
    return b.graph(root)


def quad_tree(shape) -> RegionGraph:
    """Rectangles halved along their longer side, down to single pixels."""
    h, w = check_shape(shape)
    b = Builder()

    def rect(r0: int, r1: int, c0: int, c1: int) -> int:
        me = b.region(pixels(range(r0, r1), range(c0, c1), w))
        if (r1 - r0) * (c1 - c0) > 1:
            if r1 - r0 >= c1 - c0:
                m = (r0 + r1) // 2
                b.partitions.append((me, rect(r0, m, c0, c1), rect(m, r1, c0, c1)))
            else:
                m = (c0 + c1) // 2
                b.partitions.append((me, rect(r0, r1, c0, m), rect(r0, r1, m, c1)))
        return me

    return b.graph(rect(0, h, 0, w))


def binary_trees(n: int, depth: int = 2, repetitions: int = 4, seed: int = 0) -> RegionGraph:
    """RAT-SPN: ``repetitions`` random binary trees of ``depth`` splits sharing the root."""
    for name, value in (("variables", n), ("depth", depth), ("repetitions", repetitions)):
        if value < 1:
            raise FedpgmError(f"{name} must be >= 1, got {value}")
    rng = np.random.default_rng(seed)
    b = Builder()
    root = b.region(range(n), shared=False)

    def split(parent: int, order: list[int], d: int) -> None:
        half = len(order) // 2
        left, right = b.region(order[:half], shared=False), b.region(order[half:], shared=False)
        b.partitions.append((parent, left, right))
        for child, part in ((left, order[:half]), (right, order[half:])):
            if d > 1 and len(part) > 1:
                split(child, part, d - 1)

    if n > 1:
        for _ in range(repetitions):
            split(root, [int(v) for v in rng.permutation(n)], depth)
    return b.graph(root)


def build(structure: str, n_vars: int, shape=None, pieces: int = 8, depth: int = 2, repetitions: int = 4,
          seed: int = 0, cell: float | None = None) -> RegionGraph:
    """The named region graph; image structures need ``shape`` with H * W == n_vars."""
    if structure == "binary-trees":
        return binary_trees(n_vars, depth, repetitions, seed)
    if structure not in STRUCTURES:
        raise FedpgmError(f"unknown region graph '{structure}'; use one of {', '.join(STRUCTURES)}")
    if shape is None:
        raise FedpgmError(f"the {structure} region graph needs an image: columns named pixel_ROW_COL "
                          "forming a rectangle (use --structure binary-trees for other tables)")
    if shape[0] * shape[1] != n_vars:
        raise FedpgmError(f"image shape {tuple(shape)} does not match {n_vars} pixel columns")
    return poon_domingos(shape, pieces, cell) if structure == "pd" else quad_tree(shape)
