"""Start-up shared by the RL and SFT trainers: seeds, tokenizer, data, reward functions, policy."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ascent.config import Config
from ascent.controller.worker_group import LocalWorkerGroup, WorkerGroup
from ascent.data.datasets import PromptDatasets, load_prompt_datasets
from ascent.models.builders import resolve_device
from ascent.models.tokenizers import load_tokenizer
from ascent.rewards.loader import resolve_reward_functions
from ascent.rewards.manager import RewardManager
from ascent.workers.policy import PolicyWorker

logger = logging.getLogger(__name__)


@dataclass
class Components:
    tokenizer: object
    data: PromptDatasets
    rewards: RewardManager
    device: torch.device
    policy: WorkerGroup


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_components(config: Config) -> Components:
    """Everything that can fail on user input (tokenizer, data, reward code) is loaded before the model."""
    seed_everything(config.trainer.seed)
    tokenizer = load_tokenizer(config.model.tokenizer_path or config.model.path, config.model.trust_remote_code)
    data = load_prompt_datasets(config.data, tokenizer)
    sources = {record.data_source for record in data.train + data.val}
    rewards = RewardManager(resolve_reward_functions(config.reward.function, sources), config.reward.failure_score)
    device = resolve_device(config.trainer.device)
    logger.info("model %s on %s", config.model.path, device)
    factory = functools.partial(PolicyWorker, config, tokenizer, device, config.trainer.steps)
    policy = build_worker_group(config, factory, PolicyWorker.DISPATCH, device)
    return Components(tokenizer=tokenizer, data=data, rewards=rewards, device=device, policy=policy)


def build_worker_group(config: Config, factory: Callable[[], Any], dispatch: dict[str, str], device) -> WorkerGroup:
    """The worker in this process (backend local), or `trainer.num_workers` Ray actors forming one
    torch.distributed world (backend ray), each building its worker with `factory`."""
    if config.trainer.backend == "local":
        return LocalWorkerGroup(factory())
    from ascent.controller.ray_group import RayWorkerGroup, connect_ray

    connect_ray(config.ray.address)
    trainer = config.trainer
    logger.info("starting %d Ray workers", trainer.num_workers)
    return RayWorkerGroup(
        factory, dispatch, trainer.num_workers, use_gpu=device.type == "cuda", timeout_s=trainer.worker_timeout_s
    )
