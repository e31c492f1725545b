"""Validation: generate on the held-out prompts (greedy by default) and score them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ascent.controller.worker_group import WorkerGroup
from ascent.data.records import PromptRecord
from ascent.rewards.manager import RewardManager, ScoredBatch
from ascent.rollout.trajectories import SamplingParams, Trajectories, concat_trajectories

_PROMPTS_PER_CHUNK = 256


def is_validation_step(step: int, total_steps: int, val_every: int) -> bool:
    """Validate every `val_every` steps (0 = never) and after the last step."""
    return step == total_steps or (val_every > 0 and step % val_every == 0)


def decode_responses(trajectories: Trajectories, tokenizer) -> list[str]:
    lengths = trajectories.response_lengths.tolist()
    return [
        tokenizer.decode(ids[:length], skip_special_tokens=True)
        for ids, length in zip(trajectories.response_ids.tolist(), lengths, strict=True)
    ]


def reward_metrics(scored: ScoredBatch, prefix: str) -> dict[str, float]:
    """Mean and std of the score, mean of each named component, accuracy, and error counts."""
    metrics = {f"{prefix}/mean": statistics.fmean(scored.scores), f"{prefix}/std": statistics.pstdev(scored.scores)}
    for name, values in scored.components.items():
        present = [value for value in values if value == value]  # drop NaN: samples that did not report it
        if present:
            metrics[f"{prefix}/{name}"] = statistics.fmean(present)
    if f"{prefix}/accuracy" not in metrics:  # binary task rewards: accuracy is the fraction scored > 0
        metrics[f"{prefix}/accuracy"] = statistics.fmean(float(score > 0) for score in scored.scores)
    metrics[f"{prefix}/errors"] = float(scored.num_errors)
    for kind, count in scored.error_counts.items():
        metrics[f"{prefix}/errors/{kind}"] = float(count)
    return metrics


@dataclass
class Validation:
    metrics: dict[str, float]  # val/...
    trajectories: Trajectories  # every validation sample; group ids index `records`
    records: list[PromptRecord]  # one per sample
    scored: ScoredBatch  # one per sample


def validate(
    policy: WorkerGroup, records: list[PromptRecord], rewards: RewardManager, tokenizer, sampling: SamplingParams
) -> Validation:
    """Mean reward, accuracy and response length over `records` (val/...), and the samples. Each prompt samples
    from its own seed (`sampling.seed` + its index), so the result does not depend on how a worker group splits
    them."""
    chunks = []
    for start in range(0, len(records), _PROMPTS_PER_CHUNK):
        chunk = records[start : start + _PROMPTS_PER_CHUNK]
        prompt_seeds = [sampling.seed + start + i for i in range(len(chunk))]
        trajectories = policy.call("generate", [record.prompt_token_ids for record in chunk], sampling, prompt_seeds)
        trajectories.group_ids = trajectories.group_ids + start
        chunks.append(trajectories)
    trajectories = concat_trajectories(chunks)
    samples = [records[group] for group in trajectories.group_ids.tolist()]
    scored = rewards.score(decode_responses(trajectories, tokenizer), samples)
    metrics = reward_metrics(scored, "val")
    # The headline names: val/reward is the mean score.
    metrics["val/reward"] = metrics.pop("val/mean")
    metrics["val/response_length"] = statistics.fmean(trajectories.response_lengths.tolist())
    return Validation(metrics, trajectories, samples, scored)
