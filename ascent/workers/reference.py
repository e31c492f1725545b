"""The reference worker: a frozen copy of the initial policy, for the KL term."""

from __future__ import annotations

from typing import ClassVar

import torch

from ascent.config.schema import Config
from ascent.controller.dispatch import SPLIT
from ascent.models.builders import build_model_from_config
from ascent.rollout.trajectories import Trajectories
from ascent.workers.distributed import shard_model, world_size
from ascent.workers.logprobs import compute_response_logprobs


class ReferenceWorker:
    """Forward passes only; sharded with FSDP2 like the policy in a data-parallel world."""

    DISPATCH: ClassVar[dict[str, str]] = {"compute_logprobs": SPLIT}

    def __init__(self, config: Config, tokenizer, device: torch.device) -> None:
        self.device = device
        model = build_model_from_config(config.model, tokenizer, config.trainer.seed)
        model = model.to(device).eval().requires_grad_(False)
        self.model = shard_model(model, config.fsdp, device) if world_size() > 1 else model
        self.micro_batch_size = config.optim.micro_batch_size
        self.temperature = config.rollout.temperature

    def compute_logprobs(self, batch: Trajectories) -> torch.Tensor:
        logprobs, _ = compute_response_logprobs(self.model, batch, self.micro_batch_size, self.temperature, self.device)
        return logprobs
