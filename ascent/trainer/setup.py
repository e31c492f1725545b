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
from ascent.workers.critic import CriticWorker
from ascent.workers.policy import PolicyWorker
from ascent.workers.reference import ReferenceWorker

logger = logging.getLogger(__name__)


@dataclass
class Components:
    tokenizer: object
    data: PromptDatasets
    rewards: RewardManager
    policy: WorkerGroup
    reference: WorkerGroup | None  # when a KL term needs the initial policy
    critic: WorkerGroup | None  # when advantages come from GAE


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_components(config: Config, with_rl_roles: bool = True) -> Components:
    """Everything that can fail on user input (tokenizer, data, reward code) is loaded before the models.
    The policy group always; with `with_rl_roles`, the reference and critic groups the algorithm needs."""
    seed_everything(config.trainer.seed)
    tokenizer = load_tokenizer(config.model.tokenizer_path or config.model.path, config.model.trust_remote_code)
    data = load_prompt_datasets(config.data, tokenizer)
    sources = {record.data_source for record in data.train + data.val}
    rewards = RewardManager(resolve_reward_functions(config.reward.function, sources), config.reward.failure_score)
    device = worker_device(config)
    logger.info("model %s on %s", config.model.path, device)
    steps = config.trainer.steps
    roles = {"policy": (functools.partial(PolicyWorker, config, tokenizer, device, steps), PolicyWorker.DISPATCH)}
    if with_rl_roles and config.algorithm.kl.coef > 0:
        factory = functools.partial(ReferenceWorker, config, tokenizer, device)
        roles["reference"] = (factory, ReferenceWorker.DISPATCH)
    if with_rl_roles and config.algorithm.advantage_estimator == "gae":
        roles["critic"] = (functools.partial(CriticWorker, config, tokenizer, device, steps), CriticWorker.DISPATCH)
    groups = build_worker_groups(config, roles)
    return Components(tokenizer, data, rewards, groups["policy"], groups.get("reference"), groups.get("critic"))


def worker_device(config: Config) -> torch.device:
    """Where the workers compute: `trainer.device` in this process; on Ray, a GPU per worker when
    `trainer.gpus_per_node` gives them one (Ray makes it the actor's only visible device), else the CPU."""
    if config.trainer.backend == "ray":
        return torch.device("cuda" if config.trainer.gpus_per_node else "cpu")
    return resolve_device(config.trainer.device)


def build_worker_groups(
    config: Config, roles: dict[str, tuple[Callable[[], Any], dict[str, str]]]
) -> dict[str, WorkerGroup]:
    """One WorkerGroup per role (name -> (factory, dispatch)). Backend local: each worker in this process.
    Backend ray: `trainer.num_workers` actors forming one torch.distributed world, every role colocated on
    every actor (training, generation and the reference take turns on the same device)."""
    if config.trainer.backend == "local":
        return {role: LocalWorkerGroup(factory()) for role, (factory, _) in roles.items()}
    from ascent.controller.ray_group import RayWorld, connect_ray

    trainer = config.trainer
    connect_ray(config.ray.address)
    logger.info("starting %d Ray workers on %d node(s)", trainer.num_workers, trainer.nnodes)
    world = RayWorld(trainer.num_workers, trainer.nnodes, bool(trainer.gpus_per_node), trainer.worker_timeout_s)
    try:
        mini = config.optim.mini_batch_size
        return {role: world.group(role, factory, dispatch, mini) for role, (factory, dispatch) in roles.items()}
    except BaseException:
        world.shutdown()
        raise
