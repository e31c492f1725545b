"""The RL trainer loop: rollout, score, advantages, logprobs, update, sync weights; validate; log."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

import torch

from ascent.algorithms.advantages import compute_advantages
from ascent.config import Config, derive_schedule
from ascent.controller.worker_group import LocalWorkerGroup
from ascent.data.sampler import PromptSampler
from ascent.rollout.trajectories import SamplingParams, Trajectories
from ascent.trainer.setup import build_components
from ascent.trainer.tracking import MetricsLogger, prepare_run_dir, timed
from ascent.trainer.validation import decode_responses, is_validation_step, reward_metrics, validate
from ascent.workers.reference import ReferenceWorker

logger = logging.getLogger(__name__)


class RLTrainer:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.run_dir = prepare_run_dir(config, "rl")
        logger.info("run directory %s\nschedule:\n%s", self.run_dir, derive_schedule(config).describe())
        parts = build_components(config)
        self.tokenizer, self.data, self.rewards, self.policy = parts.tokenizer, parts.data, parts.rewards, parts.policy
        self.reference = None
        if config.algorithm.kl_coef > 0:
            self.reference = LocalWorkerGroup(ReferenceWorker(config, self.tokenizer, parts.device))
        self.sampler = PromptSampler(len(self.data.train), config.data.seed, config.data.shuffle)
        self.history: list[dict[str, float]] = []

    def fit(self) -> Path:
        trainer = self.config.trainer
        metrics_logger = MetricsLogger(self.run_dir, trainer.steps, trainer.progress_bar)
        if self.data.val:
            self._log(metrics_logger, 0, self.validate())
        for step in range(1, trainer.steps + 1):
            metrics = self.train_step(step)
            if self.data.val and is_validation_step(step, trainer.steps, trainer.val_every):
                metrics |= self.validate()
            self._log(metrics_logger, step, metrics)
        metrics_logger.close()
        if trainer.save_final_model:
            self.policy.call("save_pretrained", self.run_dir / "final")
        self._summarise()
        return self.run_dir

    def train_step(self, step: int) -> dict[str, float]:
        timings: dict[str, float] = {}
        with timed(timings, "step"):
            records = [self.data.train[i] for i in self.sampler.next_indices(self.config.trainer.prompts_per_step)]
            with timed(timings, "rollout"):
                batch = self.policy.call("generate", [r.prompt_token_ids for r in records], self._sampling(step))
            with timed(timings, "score"):
                metrics = self.score(batch, records)
            batch.advantages = compute_advantages(
                self.config.algorithm.advantage_estimator,
                batch.rewards,
                batch.group_ids,
                batch.loss_mask,
                std_normalize=self.config.algorithm.std_normalize,
            )
            with timed(timings, "logprobs"):
                batch.old_logprobs = self.policy.call("compute_logprobs", batch)
                if self.reference is not None:
                    batch.ref_logprobs = self.reference.call("compute_logprobs", batch)
            with timed(timings, "update"):
                update_metrics = self.policy.call("update", batch)
            with timed(timings, "sync_weights"):
                self.policy.call("sync_rollout_weights")
        metrics |= {f"policy/{name}": value for name, value in update_metrics.items()}
        return metrics | batch_metrics(batch) | timings | throughput(batch, timings)

    def score(self, batch: Trajectories, records) -> dict[str, float]:
        """Set batch.rewards from the reward functions; return reward metrics."""
        samples = [records[group] for group in batch.group_ids.tolist()]
        scored = self.rewards.score(decode_responses(batch, self.tokenizer), samples)
        batch.rewards = torch.tensor(scored.scores, dtype=torch.float32)
        return reward_metrics(scored, "reward")

    def validate(self) -> dict[str, float]:
        rollout = self.config.rollout
        sampling = SamplingParams(
            max_tokens=rollout.max_response_tokens,
            temperature=rollout.val_temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            samples_per_prompt=rollout.val_samples_per_prompt,
            seed=self.config.trainer.seed,
        )
        limit = self.config.trainer.val_max_prompts or len(self.data.val)
        start = time.perf_counter()
        metrics = validate(self.policy, self.data.val[:limit], self.rewards, self.tokenizer, sampling)
        return metrics | {"timing/validation": time.perf_counter() - start}

    def _sampling(self, step: int) -> SamplingParams:
        rollout = self.config.rollout
        return SamplingParams(
            max_tokens=rollout.max_response_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            samples_per_prompt=rollout.samples_per_prompt,
            seed=self.config.trainer.seed * 1_000_003 + step,
        )

    def _log(self, metrics_logger: MetricsLogger, step: int, metrics: dict[str, float]) -> None:
        self.history.append({"step": step, **metrics})
        metrics_logger.log(step, metrics)

    def _summarise(self) -> None:
        validations = [entry for entry in self.history if "val/accuracy" in entry]
        if len(validations) >= 2:
            first, last = validations[0], validations[-1]
            logger.info(
                "validation accuracy %.3f (step %d) -> %.3f (step %d)",
                first["val/accuracy"],
                first["step"],
                last["val/accuracy"],
                last["step"],
            )
        logger.info(
            "run directory: %s\n  metrics.jsonl  one JSON line of metrics per step\n"
            "  config.yaml    the resolved config (rerun: ascent train %s)\n"
            "  final/         the trained model, a Hugging Face directory (from_pretrained loads it)",
            self.run_dir,
            self.run_dir / "config.yaml",
        )


def batch_metrics(batch: Trajectories) -> dict[str, float]:
    """Response lengths, truncation, signal-free groups and the rollout/trainer logprob mismatch."""
    lengths = batch.response_lengths.float()
    mask = batch.loss_mask
    groups = {}
    for group, reward in zip(batch.group_ids.tolist(), batch.rewards.tolist(), strict=True):
        groups.setdefault(group, []).append(reward)
    metrics = {
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "response_length/clip_ratio": statistics.fmean(reason == "length" for reason in batch.finish_reasons),
        "reward/groups_all_equal": statistics.fmean(len(set(rewards)) == 1 for rewards in groups.values()),
        "advantages/abs_mean": float((batch.advantages.abs() * mask).sum() / mask.sum().clamp(min=1)),
    }
    if batch.old_logprobs is not None:
        difference = (batch.old_logprobs - batch.rollout_logprobs).abs() * mask
        metrics["rollout/logprob_abs_diff"] = float(difference.sum() / mask.sum().clamp(min=1))
    return metrics


def throughput(batch: Trajectories, timings: dict[str, float]) -> dict[str, float]:
    generated = float(batch.response_mask.sum())
    total = generated + float(batch.prompt_mask.sum())
    return {
        "perf/rollout_tokens_per_s": generated / max(timings["timing/rollout"], 1e-9),
        "perf/tokens_per_s": total / max(timings["timing/step"], 1e-9),
    }


def train(config: Config) -> Path:
    return RLTrainer(config).fit()
