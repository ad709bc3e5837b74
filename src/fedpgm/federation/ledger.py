"""The ledger: every message that crosses the federation boundary, with its size in bytes.

Sizes are those of the codec's bytes, identical on every backend, so the communication
cost of a method can be compared across backends and methods.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Entry:
    """One message on the wire: direction, client, message type, encoded bytes, time, round."""
    direction: str  # "down" (server -> client) or "up" (client -> server)
    client: str
    message: str
    bytes: int
    time: float  # seconds since the ledger was created
    round: int


@dataclass
class Ledger:
    """Every message of a run with its encoded size (``Entry``), and the totals a report shows:
    bytes up and down, messages, rounds."""
    entries: list[Entry] = field(default_factory=list)
    rounds: int = 0
    start: float = field(default_factory=time.perf_counter)

    def record(self, direction: str, client: str, message: str, nbytes: int) -> None:
        self.entries.append(Entry(direction, client, message, int(nbytes),
                                  time.perf_counter() - self.start, self.rounds))

    def new_round(self) -> int:
        self.rounds += 1
        return self.rounds

    def totals(self) -> dict:
        """``bytes_up``, ``bytes_down``, ``messages``, ``rounds`` and bytes per message name."""
        up = sum(e.bytes for e in self.entries if e.direction == "up")
        down = sum(e.bytes for e in self.entries if e.direction == "down")
        by_name: dict[str, int] = {}
        for e in self.entries:
            by_name[e.message] = by_name.get(e.message, 0) + e.bytes
        return {"bytes_up": up, "bytes_down": down, "messages": len(self.entries),
                "rounds": self.rounds, "bytes_by_message": by_name}

    def to_dict(self) -> dict:
        return {**self.totals(), "entries": [asdict(e) for e in self.entries]}
