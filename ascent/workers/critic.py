"""The critic worker: PPO's value model, its own optimizer, and the clipped value regression."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import torch

from ascent.algorithms.losses import LossOutput, value_loss
from ascent.config.schema import Config
from ascent.controller.dispatch import SPLIT, SPLIT_MINI_BATCHES
from ascent.models.value import build_value_model, response_values
from ascent.rollout.trajectories import Trajectories
from ascent.workers.distributed import (
    full_state_dict,
    load_training_state,
    rank,
    save_training_state,
    shard_model,
    world_size,
)
from ascent.workers.optim import build_lr_scheduler, build_optimizer, global_loss_normaliser, train_on_batch


class CriticWorker:
    """Values for GAE before the update, then regression of the values onto the returns. Sharded with FSDP2
    like the policy in a data-parallel world."""

    DISPATCH: ClassVar[dict[str, str]] = {"compute_values": SPLIT, "update": SPLIT_MINI_BATCHES}

    def __init__(self, config: Config, tokenizer, device: torch.device, total_steps: int) -> None:
        self.device = device
        model = config.model
        path = config.critic.path or model.path
        value_model = build_value_model(path, tokenizer, model.dtype, config.trainer.seed, model.trust_remote_code)
        value_model = value_model.to(device).train()
        self.model = shard_model(value_model, config.fsdp, device) if world_size() > 1 else value_model
        self.save_optimizer = config.trainer.save_optimizer
        self.optim = dataclasses.replace(config.optim, lr=config.critic.lr)
        self.optimizer = build_optimizer(self.model, self.optim)
        self.scheduler = build_lr_scheduler(self.optimizer, self.optim, total_steps)
        self.value_clip = config.critic.value_clip
        self.aggregation = config.algorithm.loss_aggregation
        self.max_response_tokens = config.rollout.max_response_tokens

    @torch.no_grad()
    def compute_values(self, batch: Trajectories) -> torch.Tensor:
        """V before each response token under the current critic: [B, R] float32 on CPU, 0 on padding."""
        parts = []
        for micro in batch.split(self.optim.micro_batch_size):
            micro = micro.to(self.device)
            values = response_values(self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids,
                                     micro.response_mask)  # fmt: skip
            parts.append((values * micro.response_mask).cpu())
        return torch.cat(parts)

    def update(self, batch: Trajectories) -> dict[str, float]:
        """Fit the values to `batch.returns`, clipped around `batch.values` (the values GAE used)."""
        metrics = train_on_batch(
            self.model,
            self.optimizer,
            batch,
            self.optim,
            normaliser=lambda mini: global_loss_normaliser(self.aggregation, mini, self.max_response_tokens),
            micro_batch_loss=self._micro_batch_loss,
            device=self.device,
        )
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return metrics

    def save(self, directory: str | Path) -> None:
        """The value model: its body as a Hugging Face directory plus `value_head.safetensors`. When sharded,
        every rank gathers and rank 0 writes."""
        state = full_state_dict(self.model) if world_size() > 1 else None
        if rank() == 0:
            self.model.save(directory, state)

    def save_checkpoint(self, directory: str | Path) -> None:
        optimizer = self.optimizer if self.save_optimizer else None
        save_training_state(Path(directory), self.model, optimizer, {"scheduler": self.scheduler.state_dict()})

    def load_checkpoint(self, directory: str | Path) -> None:
        extra, _ = load_training_state(Path(directory), self.model, self.optimizer)
        self.scheduler.load_state_dict(extra["scheduler"])

    def _micro_batch_loss(self, micro: Trajectories, normaliser: float) -> LossOutput:
        values = response_values(self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids,
                                 micro.response_mask)  # fmt: skip
        return value_loss(values, micro.values, micro.returns, micro.loss_mask, normaliser, self.aggregation,
                          self.value_clip)  # fmt: skip
