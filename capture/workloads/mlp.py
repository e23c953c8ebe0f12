"""The model and data shared by the DDP and Horovod workloads: an MLP of roughly --params parameters."""

from __future__ import annotations

import math

DEPTH = 4


def width_for(params: int) -> int:
    """Width w such that DEPTH square layers (w*w weights + w biases each) hold about PARAMS."""
    return max(1, int(round((-1 + math.sqrt(1 + 4 * params / DEPTH)) / 2)))


def build(params: int):
    """nn.Sequential of DEPTH Linear(w, w) layers with ReLUs between them."""
    import torch.nn as nn

    width = width_for(params)
    layers: list[nn.Module] = []
    for i in range(DEPTH):
        layers.append(nn.Linear(width, width))
        if i + 1 < DEPTH:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers), width


def gradient_bytes(model) -> int:
    """Bytes all-reduced per iteration: every trainable parameter's gradient."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def add_arguments(parser) -> None:
    parser.add_argument("--params", type=int, default=1_000_000, help="approximate parameter count")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
