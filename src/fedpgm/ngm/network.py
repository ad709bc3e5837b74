"""The NGM's network: an MLP from all columns to all columns, and its path-dependency matrix.

Written by hand (a few lines of torch) because two things no library layer offers are needed:
the product of absolute weights that measures input-to-output dependence, and
per-weight gradient masks, so stitching can freeze the global blocks of a widened layer.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class NGMNet(nn.Module):
    """MLP ``widths[0] -> ... -> widths[-1]`` with LeakyReLU between layers.

    ``weights[l]`` has shape (out, in) like ``nn.Linear``; ``frozen[l]`` (same shape, 0/1) marks
    weights whose gradient is zeroed (1 = frozen), ``frozen_bias[l]`` likewise for biases.
    """

    def __init__(self, widths: list[int], seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for d_in, d_out in zip(widths[:-1], widths[1:]):
            bound = 1.0 / np.sqrt(d_in)
            self.weights.append(nn.Parameter((torch.rand(d_out, d_in, generator=gen) * 2 - 1) * bound))
            self.biases.append(nn.Parameter((torch.rand(d_out, generator=gen) * 2 - 1) * bound))
        self.frozen: list[torch.Tensor] | None = None
        self.frozen_bias: list[torch.Tensor] | None = None

    @property
    def widths(self) -> list[int]:
        return [self.weights[0].shape[1]] + [w.shape[0] for w in self.weights]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, D_in) -> (rows, D_out)."""
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = F.linear(x, w, b)
            if i < last:
                x = F.leaky_relu(x, 0.01)
        return x

    def path_matrix(self, normalised: bool = False) -> torch.Tensor:
        """(D_in, D_out) P = |W_1|^T |W_2|^T ... |W_L|^T: the summed strength of all paths from
        input i to output j (the paper's product). ``normalised``: each factor's rows scaled to
        unit L2 norm first (the reference code's form, which NGR's sparsity term needs: every
        input then carries the same mass, so the L1 norm measures how spread it is)."""
        factors = [F.normalize(w.abs().T, dim=1) if normalised else w.abs().T for w in self.weights]
        P = factors[0]
        for factor in factors[1:]:
            P = P @ factor
        return P

    def freeze(self, frozen: list[torch.Tensor], frozen_bias: list[torch.Tensor]) -> None:
        """Zero the gradients of the marked weights from now on (stitching's global blocks)."""
        self.frozen, self.frozen_bias = frozen, frozen_bias

    def mask_gradients(self) -> None:
        if self.frozen is None or self.frozen_bias is None:
            return
        for p, m in zip(self.weights, self.frozen):
            if p.grad is not None:
                p.grad.mul_(1.0 - m)
        for p, m in zip(self.biases, self.frozen_bias):
            if p.grad is not None:
                p.grad.mul_(1.0 - m)

    def arrays(self) -> dict[str, np.ndarray]:
        """Weights and biases as float32 arrays ``W0, b0, W1, ...`` (files and messages)."""
        out = {}
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            out[f"W{i}"] = w.detach().numpy().astype(np.float32)
            out[f"b{i}"] = b.detach().numpy().astype(np.float32)
        return out

    @staticmethod
    def from_arrays(arrays: dict[str, np.ndarray], widths: list[int]) -> "NGMNet":
        net = NGMNet(widths)
        with torch.no_grad():
            for i in range(len(widths) - 1):
                net.weights[i].copy_(torch.as_tensor(arrays[f"W{i}"]))
                net.biases[i].copy_(torch.as_tensor(arrays[f"b{i}"]))
        return net
