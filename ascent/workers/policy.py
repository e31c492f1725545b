"""The policy worker: the trainable model, its optimizer, and its colocated rollout engine."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import torch

from ascent.algorithms.kl import kl_penalty
from ascent.algorithms.losses import POLICY_LOSSES, LossOutput, aggregate_token_losses, nll_loss
from ascent.config.schema import Config
from ascent.models.builders import build_model_from_config
from ascent.models.logprobs import entropy_from_logits, response_logits, token_logprobs
from ascent.rollout.engine import build_rollout_engine
from ascent.rollout.trajectories import SamplingParams, Trajectories
from ascent.workers.logprobs import compute_response_logprobs
from ascent.workers.optim import build_lr_scheduler, build_optimizer


class PolicyWorker:
    """Holds the model being trained. Training and generation take turns on the same device and weights."""

    def __init__(self, config: Config, tokenizer, device: torch.device, total_steps: int) -> None:
        self.config = config
        self.tokenizer = tokenizer
        model = build_model_from_config(config.model, tokenizer, config.trainer.seed)
        if config.model.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.model = model.to(device).train()
        self.optimizer = build_optimizer(self.model, config.optim)
        self.scheduler = build_lr_scheduler(self.optimizer, config.optim, total_steps)
        self.engine = build_rollout_engine(config.rollout.engine, self.model, tokenizer)
        self.policy_version = 0

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> Trajectories:
        trajectories = self.engine.generate(prompt_token_ids, sampling)
        trajectories.policy_version = self.policy_version
        return trajectories

    def compute_logprobs(self, batch: Trajectories, with_entropy: bool = False):
        """Logprobs [B, R] of the response tokens under the current weights (and entropy when asked)."""
        logprobs, entropy = compute_response_logprobs(
            self.model, batch, self.config.optim.micro_batch_size, self.config.rollout.temperature, with_entropy
        )
        return (logprobs, entropy) if with_entropy else logprobs

    def update(self, batch: Trajectories, objective: str = "rl") -> dict[str, float]:
        """Optimizer updates over `batch`: epochs x mini-batches, each accumulated over micro-batches.

        objective "rl": the configured policy loss (needs advantages and old_logprobs, and ref_logprobs
        when algorithm.kl_coef > 0). objective "sft": negative log-likelihood of the response tokens.
        Returns metrics averaged over the updates; the lr schedule advances by one trainer step.
        """
        optim = self.config.optim
        mini_batch_size = optim.mini_batch_size or len(batch)
        totals: dict[str, float] = defaultdict(float)
        num_updates = 0
        for _ in range(optim.epochs):
            for mini_batch in batch.split(mini_batch_size):
                for name, value in self._optimizer_step(mini_batch, objective).items():
                    totals[name] += value
                num_updates += 1
        metrics = {name: value / num_updates for name, value in totals.items()}
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return metrics

    def _optimizer_step(self, mini_batch: Trajectories, objective: str) -> dict[str, float]:
        device = next(self.model.parameters()).device
        normaliser = float(mini_batch.loss_mask.sum().clamp(min=1))
        sums: dict[str, float] = defaultdict(float)
        self.optimizer.zero_grad(set_to_none=True)
        for micro in mini_batch.split(self.config.optim.micro_batch_size):
            output = self._micro_batch_loss(micro.to(device), normaliser, objective)
            output.loss.backward()
            for name, value in output.metrics.items():
                sums[name] += float(value)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.max_grad_norm))
        if math.isfinite(grad_norm):
            self.optimizer.step()
        sums["grad_norm"] = grad_norm
        sums["skipped_updates"] = float(not math.isfinite(grad_norm))
        return sums

    def _micro_batch_loss(self, micro: Trajectories, normaliser: float, objective: str) -> LossOutput:
        algorithm = self.config.algorithm
        temperature = 1.0 if objective == "sft" else self.config.rollout.temperature
        logits = response_logits(
            self.model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask
        )
        logprobs = token_logprobs(logits, micro.response_ids, temperature)
        if objective == "sft":
            return nll_loss(logprobs, micro.loss_mask, normaliser)
        output = POLICY_LOSSES[algorithm.policy_loss](
            logprobs,
            micro.old_logprobs,
            micro.advantages,
            micro.loss_mask,
            normaliser,
            clip_low=algorithm.clip_low,
            clip_high=algorithm.clip_high,
            aggregation=algorithm.loss_aggregation,
        )
        loss, metrics = output.loss, dict(output.metrics)
        entropy = entropy_from_logits(logits if algorithm.entropy_coef else logits.detach(), temperature)
        entropy_share = aggregate_token_losses(entropy, micro.loss_mask, normaliser, algorithm.loss_aggregation)
        metrics["entropy"] = entropy_share.detach()
        if algorithm.entropy_coef:
            loss = loss - algorithm.entropy_coef * entropy_share
        if algorithm.kl_coef:
            kl = kl_penalty(logprobs, micro.ref_logprobs, algorithm.kl_estimator)
            kl_share = aggregate_token_losses(kl, micro.loss_mask, normaliser, algorithm.loss_aggregation)
            loss = loss + algorithm.kl_coef * kl_share
            metrics["kl_ref"] = kl_share.detach()
        metrics["loss"] = loss.detach()
        return LossOutput(loss=loss, metrics=metrics)

    def sync_rollout_weights(self) -> int:
        """Hand the updated weights to the rollout engine and bump the policy version."""
        self.engine.update_weights(self.model.named_parameters())
        self.policy_version += 1
        return self.policy_version

    def save_pretrained(self, directory: str | Path) -> None:
        """A Hugging Face directory (safetensors, config, tokenizer) that `from_pretrained` loads."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        self.model.generation_config.save_pretrained(directory)
