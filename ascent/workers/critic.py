"""The critic worker: PPO's value model, its own optimizer, and the clipped value regression."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ascent.algorithms.losses import LossOutput, loss_normaliser, value_loss
from ascent.config.schema import Config
from ascent.models.value import build_value_model, response_values
from ascent.rollout.trajectories import Trajectories
from ascent.workers.optim import build_lr_scheduler, build_optimizer, train_on_batch


class CriticWorker:
    """Values for GAE before the update, then regression of the values onto the returns."""

    def __init__(self, config: Config, tokenizer, device: torch.device, total_steps: int) -> None:
        model = config.model
        path = config.critic.path or model.path
        self.model = build_value_model(path, tokenizer, model.dtype, config.trainer.seed, model.trust_remote_code)
        self.model.to(device).train()
        self.optim = dataclasses.replace(config.optim, lr=config.critic.lr)
        self.optimizer = build_optimizer(self.model, self.optim)
        self.scheduler = build_lr_scheduler(self.optimizer, self.optim, total_steps)
        self.value_clip = config.critic.value_clip
        self.aggregation = config.algorithm.loss_aggregation
        self.max_response_tokens = config.rollout.max_response_tokens

    @torch.no_grad()
    def compute_values(self, batch: Trajectories) -> torch.Tensor:
        """V before each response token under the current critic: [B, R] float32 on CPU, 0 on padding."""
        device = next(self.model.parameters()).device
        parts = []
        for micro in batch.split(self.optim.micro_batch_size):
            micro = micro.to(device)
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
            normaliser=lambda mini: loss_normaliser(self.aggregation, mini.loss_mask, self.max_response_tokens),
            micro_batch_loss=self._micro_batch_loss,
        )
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return metrics

    def save(self, directory: str | Path) -> None:
        """The value model: its body as a Hugging Face directory plus `value_head.safetensors`."""
        self.model.save(directory)

    def _micro_batch_loss(self, micro: Trajectories, normaliser: float) -> LossOutput:
        values = response_values(self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids,
                                 micro.response_mask)  # fmt: skip
        return value_loss(values, micro.values, micro.returns, micro.loss_mask, normaliser, self.aggregation,
                          self.value_clip)  # fmt: skip
