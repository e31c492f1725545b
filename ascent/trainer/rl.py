"""The RL trainer loop: rollout, score, filter, logprobs, advantages, update, sync weights; validate; log."""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from ascent.algorithms.advantages import compute_advantages, token_level_rewards
from ascent.algorithms.controllers import adaptive_entropy_coef, adaptive_kl_coef, entropy_bonus_active
from ascent.algorithms.filters import informative_samples, mask_truncated, overlong_penalty
from ascent.algorithms.kl import kl_penalty
from ascent.config import Config, derive_schedule
from ascent.controller.worker_group import WorkerGroup
from ascent.data.records import PromptRecord
from ascent.data.sampler import PromptSampler
from ascent.report import write_report_or_warn
from ascent.rewards.manager import ScoredBatch
from ascent.rollout.trajectories import SamplingParams, Trajectories, concat_trajectories
from ascent.trainer.checkpoint import better, load_checkpoint, resume_point, save_checkpoint, write_best
from ascent.trainer.rollout_log import drop_rollout_samples_after, is_rollout_log_step, log_rollout_samples
from ascent.trainer.setup import build_components
from ascent.trainer.trackers import build_trackers
from ascent.trainer.tracking import MetricsLogger, prepare_run_dir, timed
from ascent.trainer.validation import decode_responses, is_validation_step, reward_metrics, validate
from ascent.workers.policy import LossCoefficients

logger = logging.getLogger(__name__)


class RLTrainer:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.run_dir = prepare_run_dir(config, "rl")
        logger.info("run directory %s\nschedule:\n%s", self.run_dir, derive_schedule(config).describe())
        parts = build_components(config)
        self.tokenizer, self.data, self.rewards = parts.tokenizer, parts.data, parts.rewards
        self.policy, self.reference, self.critic = parts.policy, parts.reference, parts.critic
        algorithm = config.algorithm
        self.sampler = PromptSampler(len(self.data.train), config.data.seed, config.data.shuffle)
        self.controllers = ControllerState(kl_coef=algorithm.kl.coef, entropy_coef=algorithm.entropy.coef)
        self.history: list[dict[str, float]] = []
        self.resumed_step = 0
        self.best: dict[str, float] = {}  # trainer.keep_best: {"step", "value"} of the best checkpoint so far
        try:
            resume_from = resume_point(config, self.run_dir)
            if resume_from is not None:
                self.restore(resume_from)
        except BaseException:
            self.shutdown()
            raise

    def trained_groups(self) -> dict[str, WorkerGroup]:
        """The roles whose state changes during the run; the reference stays the initial model."""
        return {role: group for role, group in (("policy", self.policy), ("critic", self.critic)) if group is not None}

    def save(self, step: int, metrics: dict[str, float]) -> None:
        trainer = self.config.trainer
        value = metrics.get(trainer.keep_best)
        improved = value is not None and better(value, self.best.get("value"), trainer.keep_best_mode)
        if improved:
            self.best = {"step": step, "value": value}
        state = {
            "sampler": self.sampler.state_dict(),
            "controllers": dataclasses.asdict(self.controllers),
            "best": self.best,
        }
        path = save_checkpoint(self.run_dir, step, self.trained_groups(), state, self.config, self.best.get("step"))
        if improved:
            write_best(self.run_dir, step, trainer.keep_best, value)
        logger.info("checkpoint %s%s", path, f" (best {trainer.keep_best}={value:.4g})" if improved else "")

    def restore(self, path: Path) -> None:
        """Continue from the checkpoint at `path`: workers, data position, controllers, RNG, step."""
        state = load_checkpoint(path, self.trained_groups(), self.config)
        self.sampler.load_state_dict(state["sampler"])
        self.controllers = ControllerState(**state["controllers"])
        self.best = state.get("best", {})
        self.resumed_step = state["step"]
        logger.info("resumed from %s (step %d)", path, self.resumed_step)

    def fit(self) -> Path:
        try:
            self._fit()
        finally:
            self.shutdown()
            write_report_or_warn(self.run_dir)  # a failed run's report shows how far it got
        self._summarise()
        return self.run_dir

    def shutdown(self) -> None:
        """Release the worker groups (Ray actors and their devices); safe to call again."""
        for group in (self.policy, self.reference, self.critic):
            if group is not None:
                group.shutdown()

    def _fit(self) -> None:
        trainer = self.config.trainer
        trackers = build_trackers(self.config, self.run_dir, self.resumed_step)
        if self.resumed_step:
            drop_rollout_samples_after(self.run_dir, self.resumed_step)
        with MetricsLogger(self.run_dir, trainer.steps, trainer.progress_bar, self.resumed_step, trackers) as log:
            self.history = list(log.kept)
            if self.resumed_step >= trainer.steps:
                logger.info("the checkpoint is at step %d: trainer.steps=%d are done", self.resumed_step, trainer.steps)
            if self.data.val and not self.resumed_step:
                self._log(log, 0, self.validate(0))
            for step in range(self.resumed_step + 1, trainer.steps + 1):
                metrics = self.train_step(step)
                if self.data.val and is_validation_step(step, trainer.steps, trainer.val_every):
                    metrics |= self.validate(step)
                self._log(log, step, metrics)
                if trainer.save_every and (step % trainer.save_every == 0 or step == trainer.steps):
                    self.save(step, metrics)
        if trainer.save_final_model:
            self.policy.call("save_pretrained", self.run_dir / "final")
            if self.critic is not None:
                self.critic.call("save", self.run_dir / "critic")

    def train_step(self, step: int) -> dict[str, float]:
        timings: dict[str, float] = {}
        with timed(timings, "step"):
            batch, records, metrics, scored = self.collect(step, timings)
            if len(batch):
                metrics |= self.learn(batch, records, timings)
        if not len(batch):
            logger.warning("step %d: every group scored the same; nothing to train on", step)
            return metrics | timings
        trainer = self.config.trainer
        if is_rollout_log_step(step, trainer.steps, trainer.log_rollouts_every):
            samples = [records[group] for group in batch.group_ids.tolist()]
            log_rollout_samples(
                self.run_dir, step, "train", batch, samples, scored, self.tokenizer, trainer.log_rollouts_max
            )
        return metrics | batch_metrics(batch) | timings | throughput(batch, timings)

    def learn(self, batch: Trajectories, records: list[PromptRecord], timings: dict[str, float]) -> dict[str, float]:
        """logprobs, advantages, update, sync weights: everything after the batch is collected."""
        algorithm = self.config.algorithm
        metrics: dict[str, float] = {}
        baseline_rewards = None
        if algorithm.advantage_estimator == "remax":
            with timed(timings, "rollout"):
                baseline_rewards, metrics["reward/greedy_baseline"] = self.greedy_baseline(batch, records)
        if algorithm.mask_truncated:
            batch.loss_mask = mask_truncated(batch.loss_mask, batch.finish_reasons)
        with timed(timings, "logprobs"):
            entropy = None  # per token, only for the adaptive entropy control
            if algorithm.entropy.adaptive:
                batch.old_logprobs, entropy = self.policy.call("compute_logprobs", batch, with_entropy=True)
            else:
                batch.old_logprobs = self.policy.call("compute_logprobs", batch)
            if self.reference is not None:
                batch.ref_logprobs = self.reference.call("compute_logprobs", batch)
            if self.critic is not None:
                batch.values = self.critic.call("compute_values", batch)
        metrics |= self.compute_advantages(batch, baseline_rewards)
        coefficients = self.loss_coefficients(batch, entropy)
        with timed(timings, "update"):
            metrics |= {
                f"policy/{name}": value
                for name, value in self.policy.call("update", batch, coefficients=coefficients).items()
            }
            if self.critic is not None:
                metrics |= {f"critic/{name}": value for name, value in self.critic.call("update", batch).items()}
        with timed(timings, "sync_weights"):
            self.policy.call("sync_rollout_weights")
        return metrics | self.update_controllers(metrics, len(batch))

    def collect(self, step: int, timings: dict[str, float]) -> Collected:
        """Rollout and score `prompts_per_step` prompts. With a group filter, groups whose rewards are all equal
        are dropped; dynamic sampling (DAPO) then samples further rounds of prompts until `prompts_per_step`
        groups are informative or `max_generation_rounds` is reached, and trains on the first that many.
        Group ids index the returned records. Reward metrics cover every sample generated."""
        algorithm = self.config.algorithm
        wanted = self.config.trainer.prompts_per_step
        records: list[PromptRecord] = []
        kept: list[Trajectories] = []
        kept_scored: list[ScoredBatch] = []  # row by row with `kept`
        scored_rounds: list[ScoredBatch] = []
        engine_timings: dict[str, float] = {}
        num_groups = num_informative_groups = 0
        for generation_round in range(algorithm.max_generation_rounds):
            new_records = [self.data.train[i] for i in self.sampler.next_indices(wanted)]
            with timed(timings, "rollout"):
                prompts = [record.prompt_token_ids for record in new_records]
                sampling = self._sampling(step, generation_round)
                # One seed per prompt, by its place in the step: a worker group may split the prompts any way.
                prompt_seeds = [sampling.seed * 1_000_003 + len(records) + i for i in range(len(prompts))]
                batch = self.policy.call("generate", prompts, sampling, prompt_seeds)
            for name, seconds in self.policy.call("rollout_timings").items():  # rank 0's, on Ray
                engine_timings[f"rollout/{name}"] = engine_timings.get(f"rollout/{name}", 0.0) + seconds
            batch.group_ids = batch.group_ids + len(records)
            records += new_records
            with timed(timings, "score"):
                scored = self.score(batch, records)
            scored_rounds.append(scored)
            informative = informative_samples(batch.rewards, batch.group_ids)
            num_groups += len(new_records)
            num_informative_groups += len(batch.group_ids[informative].unique())
            if algorithm.group_filter != "none":
                rows = informative.nonzero().squeeze(-1)
                batch, scored = batch.select(rows), scored.select(rows.tolist())
            kept.append(batch)
            kept_scored.append(scored)
            if algorithm.group_filter != "dynamic" or num_informative_groups >= wanted:
                break
        batch, scored = concat_trajectories(kept), ScoredBatch.concat(kept_scored)
        if algorithm.group_filter == "dynamic" and num_informative_groups < wanted:
            logger.warning(
                "step %d: %d of %d groups informative after %d rollout rounds (algorithm.max_generation_rounds); "
                "training on a smaller batch",
                step,
                num_informative_groups,
                wanted,
                algorithm.max_generation_rounds,
            )
        if algorithm.group_filter == "dynamic":
            first_groups = list(dict.fromkeys(batch.group_ids.tolist()))[:wanted]
            rows = torch.isin(batch.group_ids, torch.tensor(first_groups)).nonzero().squeeze(-1)
            batch, scored = batch.select(rows), scored.select(rows.tolist())
        metrics = reward_metrics(ScoredBatch.concat(scored_rounds), "reward") | engine_timings
        metrics["reward/groups_all_equal"] = 1 - num_informative_groups / num_groups
        if algorithm.group_filter != "none":
            metrics["filter/generation_rounds"] = float(generation_round + 1)
            metrics["filter/trained_groups"] = float(len(batch.group_ids.unique()))
        return Collected(batch, records, metrics, scored)

    def score(self, batch: Trajectories, records: list[PromptRecord]) -> ScoredBatch:
        """Set batch.rewards: the reward functions' scores, plus DAPO's overlong penalty when it is on."""
        samples = [records[group] for group in batch.group_ids.tolist()]
        scored = self.rewards.score(decode_responses(batch, self.tokenizer), samples)
        batch.rewards = torch.tensor(scored.scores, dtype=torch.float32) + self._overlong_penalty(batch)
        return scored

    def _overlong_penalty(self, batch: Trajectories) -> torch.Tensor:
        algorithm, max_tokens = self.config.algorithm, self.config.rollout.max_response_tokens
        buffer_tokens = round(algorithm.overlong_buffer_fraction * max_tokens)
        return overlong_penalty(batch.response_lengths, max_tokens, buffer_tokens, algorithm.overlong_penalty)

    def greedy_baseline(self, batch: Trajectories, records: list[PromptRecord]) -> tuple[torch.Tensor, float]:
        """ReMax's baseline: the (shaped) reward of one greedy response per prompt, per sample [B]."""
        groups = batch.group_ids.unique().tolist()
        sampling = SamplingParams(max_tokens=self.config.rollout.max_response_tokens, temperature=0.0)
        greedy = self.policy.call("generate", [records[group].prompt_token_ids for group in groups], sampling)
        greedy.group_ids = torch.tensor(groups)
        self.score(greedy, records)
        by_group = dict(zip(groups, greedy.rewards.tolist(), strict=True))
        return torch.tensor([by_group[group] for group in batch.group_ids.tolist()]), float(greedy.rewards.mean())

    def compute_advantages(self, batch: Trajectories, baseline_rewards: torch.Tensor | None) -> dict[str, float]:
        """Rewards (minus the KL penalty when KL is in the reward), then the configured estimator."""
        algorithm = self.config.algorithm
        metrics, kl, kl_coef = {}, None, 0.0
        rewards = batch.rewards
        if self.reference is not None:
            kl = kl_penalty(batch.old_logprobs, batch.ref_logprobs, algorithm.kl.estimator)
            metrics["kl/token_mean"] = masked_mean(kl, batch.loss_mask)  # what the adaptive controller steers
            if algorithm.kl.placement == "reward":
                kl_coef = self.controllers.kl_coef
                rewards = rewards - kl_coef * (kl * batch.loss_mask).sum(-1)
        token_rewards = token_level_rewards(batch.rewards, batch.loss_mask, kl, kl_coef)
        output = compute_advantages(
            algorithm.advantage_estimator,
            rewards,
            token_rewards,
            batch.loss_mask,
            batch.group_ids,
            values=batch.values,
            baseline_rewards=baseline_rewards,
            gamma=algorithm.gamma,
            lam=algorithm.lam,
            std_normalize=algorithm.std_normalize,
        )
        batch.advantages, batch.returns = output.advantages, output.returns
        return metrics

    def loss_coefficients(self, batch: Trajectories, entropy: torch.Tensor | None) -> LossCoefficients:
        """This step's KL and entropy coefficients. Skywork-OR1's control applies the entropy bonus only while
        the batch's mean token entropy (under the policy before the update, [B, R]) is at or below the target."""
        algorithm, state = self.config.algorithm, self.controllers
        kl = state.kl_coef if self.reference is not None and algorithm.kl.placement == "loss" else 0.0
        entropy_coef = state.entropy_coef
        if algorithm.entropy.adaptive:
            state.last_entropy = masked_mean(entropy, batch.loss_mask)
            if not entropy_bonus_active(state.last_entropy, algorithm.entropy.target):
                entropy_coef = 0.0
        return LossCoefficients(kl=kl, entropy=entropy_coef)

    def update_controllers(self, metrics: dict[str, float], num_samples: int) -> dict[str, float]:
        """Step the adaptive KL and entropy controllers; report the coefficients used this step."""
        algorithm, state = self.config.algorithm, self.controllers
        report = {}
        if self.reference is not None:
            report["kl/coef"] = state.kl_coef
            if algorithm.kl.controller == "adaptive":
                observed = metrics["kl/token_mean"]
                kl = algorithm.kl
                state.kl_coef = adaptive_kl_coef(state.kl_coef, observed, kl.target, kl.horizon, num_samples)
        if algorithm.entropy.adaptive:
            entropy = algorithm.entropy
            report["entropy/coef"] = state.entropy_coef
            report["entropy/observed"] = state.last_entropy
            report["entropy/bonus_active"] = float(entropy_bonus_active(state.last_entropy, entropy.target))
            state.entropy_coef = adaptive_entropy_coef(
                state.entropy_coef, state.last_entropy, entropy.target, entropy.delta, entropy.max_coef
            )
        return report

    def validate(self, step: int) -> dict[str, float]:
        """Validation metrics; with trainer.log_rollouts_every, the samples go to rollouts/val_step_N.jsonl."""
        rollout = self.config.rollout
        sampling = SamplingParams(
            max_tokens=rollout.max_response_tokens,
            temperature=rollout.val_temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            min_p=rollout.min_p,
            stop=tuple(rollout.stop),
            samples_per_prompt=rollout.val_samples_per_prompt,
            seed=self.config.trainer.seed,
        )
        trainer = self.config.trainer
        limit = trainer.val_max_prompts or len(self.data.val)
        start = time.perf_counter()
        result = validate(self.policy, self.data.val[:limit], self.rewards, self.tokenizer, sampling)
        seconds = time.perf_counter() - start
        if trainer.log_rollouts_every:
            batch, records, scored = result.trajectories, result.records, result.scored
            log_rollout_samples(
                self.run_dir, step, "val", batch, records, scored, self.tokenizer, trainer.log_rollouts_max
            )
        return result.metrics | {"timing/validation": seconds}

    def _sampling(self, step: int, generation_round: int = 0) -> SamplingParams:
        rollout = self.config.rollout
        return SamplingParams(
            max_tokens=rollout.max_response_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            min_p=rollout.min_p,
            stop=tuple(rollout.stop),
            samples_per_prompt=rollout.samples_per_prompt,
            seed=self.config.trainer.seed * 1_000_003 + step + 100_003 * generation_round,
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
            "  final/         the trained model, a Hugging Face directory (from_pretrained loads it)\n"
            "  rollouts/      samples of train and validation steps, token by token\n"
            "  report.html    curves and a rollout browser (serve it: ascent view %s)",
            self.run_dir,
            self.run_dir / "config.yaml",
            self.run_dir,
        )


class Collected(NamedTuple):
    """One step's training samples, from `RLTrainer.collect`."""

    batch: Trajectories
    records: list[PromptRecord]  # indexed by the batch's group ids
    metrics: dict[str, float]  # reward metrics over every sample generated, kept or not
    scored: ScoredBatch  # the rewards of the batch's samples, row by row


@dataclass
class ControllerState:
    """What the coefficient controllers carry from step to step; a checkpoint must save it to resume exactly."""

    kl_coef: float
    entropy_coef: float
    last_entropy: float = 0.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp(min=1))


def batch_metrics(batch: Trajectories) -> dict[str, float]:
    """Response lengths, truncation, advantages and the rollout/trainer logprob mismatch."""
    lengths = batch.response_lengths.float()
    mask = batch.loss_mask
    metrics = {
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "response_length/clip_ratio": statistics.fmean(reason == "length" for reason in batch.finish_reasons),
        "advantages/abs_mean": masked_mean(batch.advantages.abs(), mask),
    }
    for reason in sorted(set(batch.finish_reasons)):
        metrics[f"rollout/finish_reason/{reason}"] = statistics.fmean(r == reason for r in batch.finish_reasons)
    if batch.old_logprobs is not None:
        log_ratio = batch.old_logprobs - batch.rollout_logprobs  # log p_train / p_rollout on rollout samples
        metrics["rollout/logprob_abs_diff"] = masked_mean(log_ratio.abs(), mask)
        metrics["rollout/mismatch_kl"] = masked_mean(torch.expm1(log_ratio) - log_ratio, mask)  # k3 of KL(roll||train)
    if batch.returns is not None:
        metrics["critic/returns_mean"] = masked_mean(batch.returns, mask)
    return metrics


def throughput(batch: Trajectories, timings: dict[str, float]) -> dict[str, float]:
    generated = float(batch.response_mask.sum())
    total = generated + float(batch.prompt_mask.sum())
    return {
        "rollout/tokens_per_s": generated / max(timings["timing/rollout"], 1e-9),
        "perf/tokens_per_s": total / max(timings["timing/step"], 1e-9),
    }


def train(config: Config) -> Path:
    return RLTrainer(config).fit()
