"""Early stopping on a validation loss, keeping the best weights (one helper for every trainer)."""

from __future__ import annotations

import copy

from torch import nn


class EarlyStopping:
    """``update(loss)`` after each epoch or round: remembers ``module``'s weights at the best loss
    and returns True once ``patience`` updates in a row did not improve it by ``tolerance``;
    ``restore()`` puts the best weights back and returns the module. With ``keep_module`` it keeps
    a copy of the whole module instead, for a module whose architecture changes while it trains
    (F-CM's per-round graph), and ``restore()`` returns that copy."""

    def __init__(self, module: nn.Module, patience: int, tolerance: float = 1e-4, keep_module: bool = False) -> None:
        self.module, self.patience, self.tolerance, self.keep_module = module, patience, tolerance, keep_module
        self.best, self.since = float("inf"), 0
        self.state: nn.Module | dict | None = None  # the best module (keep_module) or its state dict

    def update(self, loss: float) -> bool:
        if loss < self.best - self.tolerance:
            self.best, self.since = loss, 0
            self.state = (copy.deepcopy(self.module) if self.keep_module else
                          {k: v.detach().clone() for k, v in self.module.state_dict().items()})
            return False
        self.since += 1
        return self.since >= self.patience

    def restore(self) -> nn.Module:
        if self.state is None:
            return self.module
        if isinstance(self.state, nn.Module):  # (keep_module)
            return self.state
        self.module.load_state_dict(self.state)
        return self.module
