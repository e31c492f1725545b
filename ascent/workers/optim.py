"""Optimizer, learning-rate schedule, and the update loop shared by the policy and critic workers."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import torch

from ascent.algorithms.losses import LossOutput, loss_normaliser
from ascent.config.schema import OptimConfig
from ascent.rollout.trajectories import Trajectories
from ascent.workers.distributed import all_reduce_sum, world_size


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


def train_on_batch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Trajectories,
    config: OptimConfig,
    normaliser: Callable[[Trajectories], float],
    micro_batch_loss: Callable[[Trajectories, float], LossOutput],
    device: torch.device,
) -> dict[str, float]:
    """Optimizer updates over `batch`: `config.epochs` passes of mini-batches, each accumulated over
    micro-batches. `normaliser(mini_batch)` is computed once per mini-batch and handed to every
    `micro_batch_loss(micro, normaliser)`, whose shares then sum to the mini-batch loss.
    Returns metrics averaged over the updates; an update whose gradient norm is not finite is skipped."""
    ranks = world_size()
    # `config.mini_batch_size` counts samples over all ranks; each rank holds its share of every mini-batch.
    mini_batch_size = (config.mini_batch_size // ranks) if config.mini_batch_size else len(batch)
    shares: dict[str, float] = defaultdict(float)
    grad_norms, skipped = [], 0
    for _ in range(config.epochs):
        for mini_batch in batch.split(mini_batch_size):
            mini_normaliser = normaliser(mini_batch)
            optimizer.zero_grad(set_to_none=True)
            for micro in mini_batch.split(config.micro_batch_size):
                output = micro_batch_loss(micro.to(device), mini_normaliser)
                # Data parallelism averages gradients over ranks; the shares are parts of a sum.
                (output.loss * ranks).backward()
                for name, value in output.metrics.items():
                    shares[name] += float(value)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm))
            if math.isfinite(grad_norm):
                optimizer.step()
            grad_norms.append(grad_norm)
            skipped += not math.isfinite(grad_norm)
    metrics = {name: value / len(grad_norms) for name, value in all_reduce_sum(dict(shares)).items()}
    return metrics | {"grad_norm": sum(grad_norms) / len(grad_norms), "skipped_updates": float(skipped)}


def global_loss_normaliser(mode: str, mini_batch: Trajectories, max_response_tokens: int) -> float:
    """`loss_normaliser` of a mini-batch spread over all data-parallel ranks: each rank's count (tokens or
    samples) summed over ranks. Rows without response tokens are padding a worker group added so that the
    batch divides over the ranks: they are not samples. A rank with nothing to count adds 0, not the 1 that
    `loss_normaliser` returns for an empty mask."""
    if mode == "token-sum":
        return 1.0
    loss_mask = mini_batch.loss_mask[mini_batch.response_mask.any(-1)]
    countable = len(loss_mask) if mode == "seq-mean-token-sum-norm" else bool(loss_mask.any())
    local = loss_normaliser(mode, loss_mask, max_response_tokens) if countable else 0.0
    return max(all_reduce_sum({"normaliser": local})["normaliser"], 1.0)
