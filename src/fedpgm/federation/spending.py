"""What a node has spent of its differential-privacy budget in earlier runs.

A run's state is its own (``workdir/run-{id}``), so a budget kept there would start afresh with
every run a coordinator starts. A Flower node therefore also keeps, beside its runs' folders,
``dp-spending.json``: the DP accountant's steps (``[noise multiplier, sample rate, steps]``, as
``fedpgm.concepts.privacy.ClientDP`` records them) of each run, by run id. A handler sees the
steps of every other run (``ClientContext.earlier_dp``) and composes them with its own, so a
client's ``max_epsilon`` bounds all the training its rows have served on that node. The file
is replaced atomically after each message; runs on one node are assumed to take turns (two runs
training at the same moment could each miss the other's last update). In-process runs keep no
such file: every party there is the same user's.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from fedpgm.errors import FedpgmError

SPENDING = "dp-spending.json"


def read(node_dir: Path) -> dict[str, list]:
    """Run id -> accountant steps, from ``node_dir``'s spending file ({} where there is none)."""
    path = node_dir / SPENDING
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise FedpgmError(f"{path} is not JSON ({e}); restore it from a backup, or delete it to forget what the "
                          "node has spent") from None
    if not isinstance(doc, dict) or not all(isinstance(v, list) for v in doc.values()):
        raise FedpgmError(f"{path} does not map run ids to lists of DP steps")
    return doc


def earlier(node_dir: Path, run: str) -> list:
    """The accountant steps every run but ``run`` spent on this node, in run order."""
    return [step for key, steps in sorted(read(node_dir).items()) if key != run for step in steps]


def record(node_dir: Path, run: str, steps: list) -> None:
    """Set ``run``'s steps (all of them so far: a run's history only grows) in the spending file."""
    doc = read(node_dir)
    if doc.get(run) == steps:
        return
    doc[run] = steps
    node_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=node_dir, prefix=f".{SPENDING}.")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(doc))
    os.replace(tmp, node_dir / SPENDING)
