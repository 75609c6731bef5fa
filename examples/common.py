"""Generated data, models and a parameter digest shared by the examples (no stint code here)."""

from __future__ import annotations

import argparse
import hashlib
import os
import random

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before CUDA starts)


def classification_data(n: int = 2048, d: int = 32, classes: int = 4, seed: int = 1234):
    """Points labelled by the argmax of a random linear map: learnable, and generated on the fly."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = (x @ torch.randn(d, classes, generator=g)).argmax(dim=1)
    return x, y


def image_data(n: int = 1024, size: int = 16, classes: int = 10, seed: int = 1234):
    """Noisy 1-channel images, each class a fixed random pattern."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(classes, 1, size, size, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    x = patterns[y] + 0.5 * torch.randn(n, 1, size, size, generator=g)
    return x, y


class AugmentedImages(Dataset):
    """Noisy 1-channel images of 10 classes; training samples are augmented randomly in
    ``__getitem__`` (flip with torch, shift with Python's random, noise with NumPy), as a
    DataLoader worker would."""

    def __init__(self, train: bool, n: int = 256, size: int = 12, seed: int = 1234) -> None:
        x, y = image_data(n=n, size=size, seed=seed if train else seed + 1)
        self.x, self.y, self.train = x, y, train

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        if self.train:
            if torch.rand(()) < 0.5:
                x = x.flip(-1)
            x = x.roll(random.randint(-1, 1), dims=-2)
            x = x + torch.from_numpy(np.random.normal(0.0, 0.1, x.shape).astype(np.float32))
        return x, self.y[i]


def evaluate(model: nn.Module, loader: DataLoader) -> float:
    """Accuracy over ``loader``; the model is left in eval mode."""
    model.eval()
    right = total = 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for x, y in loader:
            right += int((model(x.to(device)).argmax(dim=1).cpu() == y).sum())
            total += len(y)
    return right / total


def mlp(d: int = 32, hidden: int = 64, classes: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, classes))


class SmallCNN(nn.Module):
    """Two conv blocks with BatchNorm (so buffers are exercised) and a linear head."""

    def __init__(self, classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def digest(model: nn.Module) -> str:
    """A short hash of every parameter and buffer: equal digests mean bitwise-equal models."""
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def pad(model: nn.Module, mb: float, seed: int) -> None:
    """A seeded random buffer of ``mb`` megabytes (float32) on ``model``: it is checkpointed
    (and hashed by ``digest``) like any buffer, and never changes."""
    if mb > 0:
        g = torch.Generator().manual_seed(seed)
        model.register_buffer("pad", torch.rand(int(mb * 1e6 / 4), generator=g))


def arguments(description: str, steps: int, batch_size: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--batch-size", type=int, default=batch_size, help="global batch")
    p.add_argument("--logical", type=int, default=None, help="logical ranks (default: STINT env or 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", default=None, help="checkpoint directory when run by hand")
    p.add_argument("--checkpoint-every", type=int, default=None, help="periodic checkpoint, steps")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step (demos, tests)")
    p.add_argument("--log-every", type=int, default=0, help="print the parameter digest every N steps")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--pad-mb", type=float, default=0.0,
                   help="add a constant buffer of this many MB to the model (a checkpoint of "
                   "a known size: the fleet's copy test)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the DataLoader examples)")
    p.add_argument("--epochs", type=int, default=2, help="epochs (the DataLoader examples)")
    p.add_argument("--eval-every", type=int, default=4, help="steps between evaluations (DataLoader examples)")
    return p
