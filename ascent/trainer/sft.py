"""Supervised fine-tuning on prompt/response data, with the RL trainer's data, model and policy worker."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from ascent.config import Config
from ascent.config.schedule import check_sft_schedule
from ascent.data.records import PromptRecord
from ascent.data.sampler import PromptSampler
from ascent.report import write_report_or_warn
from ascent.rollout.trajectories import SamplingParams, Trajectories, left_pad, right_pad
from ascent.trainer.rollout_log import log_rollout_samples
from ascent.trainer.setup import build_components
from ascent.trainer.trackers import build_trackers
from ascent.trainer.tracking import MetricsLogger, prepare_run_dir, timed
from ascent.trainer.validation import is_validation_step, validate

logger = logging.getLogger(__name__)


def sft_batch(records: list[PromptRecord], tokenizer, max_response_tokens: int) -> Trajectories:
    """Prompt token ids plus the target response (`response`, else `answer`) and EOS, trained on the target."""
    targets = []
    for record in records:
        text = record.response if record.response is not None else str(record.ground_truth)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: max_response_tokens - 1]
        targets.append([*ids, tokenizer.eos_token_id])
    prompt_ids, prompt_mask = left_pad([record.prompt_token_ids for record in records], tokenizer.pad_token_id)
    response_ids, response_mask = right_pad(targets, tokenizer.pad_token_id)
    return Trajectories(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        loss_mask=response_mask.float(),
        rollout_logprobs=torch.zeros(response_ids.shape),
        group_ids=torch.arange(len(records)),
        finish_reasons=["stop"] * len(records),
    )


def train_sft(config: Config) -> Path:
    check_sft_schedule(config)
    run_dir = prepare_run_dir(config, "sft")
    parts = build_components(config, with_rl_roles=False)
    tokenizer, data, policy = parts.tokenizer, parts.data, parts.policy
    sampler = PromptSampler(len(data.train), config.data.seed, config.data.shuffle)
    max_tokens = config.rollout.max_response_tokens
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=config.trainer.seed)
    trainer = config.trainer

    def validation_metrics(step: int) -> dict[str, float]:
        start = time.perf_counter()
        records = data.val[: trainer.val_max_prompts or len(data.val)]
        result = validate(policy, records, parts.rewards, tokenizer, sampling)
        batch = sft_batch(records, tokenizer, max_tokens)
        logprobs = policy.call("compute_logprobs", batch)
        metrics = result.metrics | {"val/nll": float(-(logprobs * batch.loss_mask).sum() / batch.loss_mask.sum())}
        seconds = time.perf_counter() - start
        if trainer.log_rollouts_every:
            samples = (result.trajectories, result.records, result.scored)
            log_rollout_samples(run_dir, step, "val", *samples, tokenizer, trainer.log_rollouts_max)
        return metrics | {"timing/validation": seconds}

    try:
        trackers = build_trackers(config, run_dir)
        with MetricsLogger(run_dir, trainer.steps, trainer.progress_bar, trackers=trackers) as metrics_logger:
            if data.val:
                metrics_logger.log(0, validation_metrics(0))
            for step in range(1, trainer.steps + 1):
                timings: dict[str, float] = {}
                with timed(timings, "step"):
                    records = [data.train[i] for i in sampler.next_indices(config.sft.batch_size)]
                    update = policy.call("update", sft_batch(records, tokenizer, max_tokens), objective="sft")
                metrics = {"sft/nll": update.pop("nll")} | {f"policy/{name}": value for name, value in update.items()}
                if data.val and is_validation_step(step, trainer.steps, trainer.val_every):
                    metrics |= validation_metrics(step)
                metrics_logger.log(step, metrics | timings)
        policy.call("save_pretrained", run_dir / "final")
    finally:
        policy.shutdown()
        write_report_or_warn(run_dir)  # a failed run's report shows how far it got
    logger.info(
        "SFT model saved to %s (train on it: ascent train CONFIG model.path=%s)", run_dir / "final", run_dir / "final"
    )
    return run_dir
