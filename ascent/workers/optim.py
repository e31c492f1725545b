"""Optimizer and learning-rate schedule."""

from __future__ import annotations

import math

import torch

from ascent.config.schema import OptimConfig


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, schedule: str, min_lr_ratio: float) -> float:
    """Fraction of the peak lr for the update at `step` (0-based trainer step).

    Linear warm-up over `warmup_steps` ((step + 1) / warmup_steps, so the first step already learns),
    then constant, or linear / cosine decay from 1 to `min_lr_ratio` at `total_steps`.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    decay = 1 - progress if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return min_lr_ratio + (1 - min_lr_ratio) * decay


def build_optimizer(model: torch.nn.Module, config: OptimConfig) -> torch.optim.Optimizer:
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        trainable, lr=config.lr, betas=tuple(config.betas), eps=config.eps, weight_decay=config.weight_decay
    )


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, config: OptimConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Stepped once per trainer step (not per optimizer update), so warm-up is counted in trainer steps."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_multiplier(step, config.warmup_steps, total_steps, config.lr_schedule, config.min_lr_ratio),
    )
