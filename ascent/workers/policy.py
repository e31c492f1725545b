"""The policy worker: the trainable model, its optimizer, and its colocated rollout engine."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from ascent.algorithms.kl import kl_penalty
from ascent.algorithms.losses import (
    POLICY_LOSSES,
    LossOutput,
    aggregate,
    nll_loss,
    truncated_importance_weights,
)
from ascent.config.schema import AlgorithmConfig, Config
from ascent.controller.dispatch import SPLIT, SPLIT_MINI_BATCHES
from ascent.models.builders import build_model_from_config
from ascent.models.logprobs import entropy_from_logits, response_logits, token_logprobs
from ascent.rollout.engine import build_rollout_engine
from ascent.rollout.trajectories import SamplingParams, Trajectories
from ascent.workers.distributed import (
    full_parameters_in_buckets,
    full_state_dict,
    load_training_state,
    rank,
    save_training_state,
    shard_model,
    world_size,
)
from ascent.workers.logprobs import compute_response_logprobs
from ascent.workers.optim import build_lr_scheduler, build_optimizer, global_loss_normaliser, train_on_batch


@dataclass
class LossCoefficients:
    """Coefficients of the loss terms that controllers may change from step to step (0 = term off)."""

    kl: float = 0.0  # KL(policy || reference) in the loss
    entropy: float = 0.0  # entropy bonus


def build_policy_loss(algorithm: AlgorithmConfig, seed: int = 0) -> Callable[..., LossOutput]:
    """The configured policy loss with its scalar hyper-parameters bound; call it with the tensors."""
    clip = {"clip_low": algorithm.clip_low, "clip_high": algorithm.clip_high}
    covariance = {"cov_fraction": algorithm.cov_fraction}
    parameters = {
        "ppo_clip": {**clip, "dual_clip": algorithm.dual_clip},
        "gspo": clip,
        "cispo": clip,
        "gmpo": clip,
        "gpg": {},
        "sapo": {"tau_positive": algorithm.sapo_tau_positive, "tau_negative": algorithm.sapo_tau_negative},
        "clip_cov": {
            **clip,
            **covariance,
            "cov_lower": algorithm.cov_lower,
            "cov_upper": algorithm.cov_upper,
            # clip-cov's random token selection draws from its own stream, so runs stay reproducible.
            "generator": torch.Generator().manual_seed(seed),
        },
        "kl_cov": {**covariance, "cov_kl_coef": algorithm.cov_kl_coef},
        "dro": {"beta": algorithm.dro_beta},
    }[algorithm.policy_loss]
    return functools.partial(POLICY_LOSSES[algorithm.policy_loss], aggregation=algorithm.loss_aggregation, **parameters)


class PolicyWorker:
    """Holds the model being trained. Training and generation take turns on the same device.

    Alone (world size 1) the rollout engine generates with the trained module itself. In a data-parallel
    world the trained module is sharded with FSDP2 and the engine holds a full replica, which
    `sync_rollout_weights` refreshes from the gathered shards after every update.
    """

    # How a worker group spreads each method over ranks (see ascent/controller/dispatch.py).
    DISPATCH: ClassVar[dict[str, str]] = {
        "generate": SPLIT,
        "compute_logprobs": SPLIT,
        "update": SPLIT_MINI_BATCHES,
    }

    def __init__(self, config: Config, tokenizer, device: torch.device, total_steps: int) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.device = device
        model = build_model_from_config(config.model, tokenizer, config.trainer.seed)
        if config.model.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model = model.to(device).train()
        self.rollout_model = model
        if world_size() > 1:
            self.rollout_model = copy.deepcopy(model)
            model = shard_model(model, config.fsdp, device)
        self.model = model
        self.optimizer = build_optimizer(self.model, config.optim)
        self.scheduler = build_lr_scheduler(self.optimizer, config.optim, total_steps)
        self.engine = build_rollout_engine(config.rollout.engine, self.rollout_model, tokenizer)
        self.policy_loss = build_policy_loss(config.algorithm, seed=config.trainer.seed)
        self.policy_version = 0

    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingParams, prompt_seeds: list[int] | None = None
    ) -> Trajectories:
        self.engine.wake()  # an engine that frees memory between rollouts (vLLM on GPU) gets it back
        try:
            trajectories = self.engine.generate(prompt_token_ids, sampling, prompt_seeds)
        finally:
            self.engine.sleep()
        trajectories.policy_version = self.policy_version
        return trajectories

    def rollout_timings(self) -> dict[str, float]:
        """Seconds the engine spent in the stages of its last `generate` (native: prefill_s, decode_s)."""
        return dict(self.engine.last_timings)

    def compute_logprobs(self, batch: Trajectories, with_entropy: bool = False):
        """Logprobs [B, R] of the response tokens under the current weights (and entropy when asked)."""
        logprobs, entropy = compute_response_logprobs(
            self.model,
            batch,
            self.config.optim.micro_batch_size,
            self.config.rollout.temperature,
            self.device,
            with_entropy,
        )
        return (logprobs, entropy) if with_entropy else logprobs

    def update(self, batch: Trajectories, objective: str = "rl", coefficients: LossCoefficients | None = None):
        """Optimizer updates over `batch`: epochs x mini-batches, each accumulated over micro-batches.

        objective "rl": the configured policy loss (needs advantages and old_logprobs, and ref_logprobs
        when a KL term is in the loss); `coefficients` are this step's KL and entropy coefficients, which
        the trainer's controllers may change from step to step. objective "sft": negative log-likelihood
        of the response tokens. Returns metrics averaged over the updates; the lr schedule advances by
        one trainer step.
        """
        coefficients = coefficients or LossCoefficients()
        algorithm, max_tokens = self.config.algorithm, self.config.rollout.max_response_tokens
        aggregation = "token-mean" if objective == "sft" else algorithm.loss_aggregation
        metrics = train_on_batch(
            self.model,
            self.optimizer,
            batch,
            self.config.optim,
            normaliser=lambda mini_batch: global_loss_normaliser(aggregation, mini_batch, max_tokens),
            micro_batch_loss=lambda micro, normaliser: self._micro_batch_loss(
                micro, normaliser, objective, coefficients
            ),
            device=self.device,
        )
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return metrics

    def _micro_batch_loss(
        self, micro: Trajectories, normaliser: float, objective: str, coefficients: LossCoefficients
    ) -> LossOutput:
        algorithm = self.config.algorithm
        temperature = 1.0 if objective == "sft" else self.config.rollout.temperature
        logits = response_logits(
            self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask
        )
        logprobs = token_logprobs(logits, micro.response_ids, temperature)
        if objective == "sft":
            return nll_loss(logprobs, micro.loss_mask, normaliser)
        token_weights = None
        if algorithm.tis_cap:
            token_weights = truncated_importance_weights(micro.old_logprobs, micro.rollout_logprobs, algorithm.tis_cap)
        output = self.policy_loss(logprobs, micro.old_logprobs, micro.advantages, micro.loss_mask, normaliser,
                                  token_weights=token_weights)  # fmt: skip
        loss, metrics = output.loss, dict(output.metrics)
        aggregation = algorithm.loss_aggregation
        entropy = entropy_from_logits(logits if coefficients.entropy else logits.detach(), temperature)
        entropy_share = aggregate(entropy, micro.loss_mask, normaliser, aggregation)
        metrics["entropy"] = entropy_share.detach()
        if coefficients.entropy:
            loss = loss - coefficients.entropy * entropy_share
        if coefficients.kl:
            kl = kl_penalty(logprobs, micro.ref_logprobs, algorithm.kl.estimator)
            kl_share = aggregate(kl, micro.loss_mask, normaliser, aggregation)
            loss = loss + coefficients.kl * kl_share
            metrics["kl_ref"] = kl_share.detach()
        metrics["loss"] = loss.detach()
        return LossOutput(loss=loss, metrics=metrics)

    def sync_rollout_weights(self) -> int:
        """Hand the updated weights to the rollout engine and bump the policy version. Alone, the engine
        shares the trained tensors and nothing is copied; sharded, the full weights are gathered and
        loaded bucket by bucket."""
        self._push_weights_to_engine()
        self.policy_version += 1
        return self.policy_version

    def _push_weights_to_engine(self) -> None:
        if self.rollout_model is self.model:
            self.engine.update_weights(self.model.named_parameters())
        else:
            for bucket in full_parameters_in_buckets(self.model, self.config.trainer.weight_sync_bucket_mb << 20):
                self.engine.update_weights(bucket)

    def save_checkpoint(self, directory: str | Path) -> None:
        """Model, optimizer, lr schedule and policy version, in a layout any number of ranks can load."""
        extra = {"scheduler": self.scheduler.state_dict(), "policy_version": self.policy_version}
        generator = self.policy_loss.keywords.get("generator")  # clip-cov's token selection, one stream per rank
        rank_state = {"loss_generator": generator.get_state()} if generator is not None else {}
        optimizer = self.optimizer if self.config.trainer.save_optimizer else None
        save_training_state(Path(directory), self.model, optimizer, extra, rank_state)

    def load_checkpoint(self, directory: str | Path) -> None:
        """Restore `save_checkpoint`'s state (written by any number of ranks); the rollout engine gets the weights."""
        extra, rank_state = load_training_state(Path(directory), self.model, self.optimizer)
        self.scheduler.load_state_dict(extra["scheduler"])
        self.policy_version = extra["policy_version"]
        if "loss_generator" in rank_state and "generator" in self.policy_loss.keywords:
            self.policy_loss.keywords["generator"].set_state(rank_state["loss_generator"])
        self._push_weights_to_engine()

    def save_pretrained(self, directory: str | Path) -> None:
        """A Hugging Face directory (safetensors, config, tokenizer) that `from_pretrained` loads; when
        sharded, every rank gathers and rank 0 writes."""
        state = full_state_dict(self.model) if self.rollout_model is not self.model else None
        if rank() == 0:
            self.rollout_model.save_pretrained(directory, state_dict=state)
            self.tokenizer.save_pretrained(directory)
            self.rollout_model.generation_config.save_pretrained(directory)
