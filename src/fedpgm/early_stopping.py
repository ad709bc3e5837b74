"""Early stopping on a validation loss, keeping the best weights (one helper for every trainer)."""

from __future__ import annotations

from torch import nn


class EarlyStopping:
    """``update(loss)`` after each epoch or round: remembers ``module``'s weights at the best loss
    and returns True once ``patience`` updates in a row did not improve it by ``tolerance``;
    ``restore()`` puts the best weights back."""

    def __init__(self, module: nn.Module, patience: int, tolerance: float = 1e-4) -> None:
        self.module, self.patience, self.tolerance = module, patience, tolerance
        self.best, self.state, self.since = float("inf"), None, 0

    def update(self, loss: float) -> bool:
        if loss < self.best - self.tolerance:
            self.best, self.since = loss, 0
            self.state = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
            return False
        self.since += 1
        return self.since >= self.patience

    def restore(self) -> None:
        if self.state is not None:
            self.module.load_state_dict(self.state)
