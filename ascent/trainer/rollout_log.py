"""Rollout samples on disk, for reading what the policy wrote: `<run_dir>/rollouts/step_{N:06d}.jsonl` (training,
every `trainer.log_rollouts_every` steps, the first and the last) and `val_step_{N:06d}.jsonl` (each validation).

One JSON object per sample with the keys of SAMPLE_KEYS; `ascent view` reads them. At most
`trainer.log_rollouts_max` samples per file: the first groups that fit whole, so a group's samples, whose
advantages are relative to each other, are seen together.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ascent.data.records import PromptRecord
from ascent.rewards.manager import ScoredBatch
from ascent.rollout.trajectories import Trajectories
from ascent.trainer.validation import decode_responses

ROLLOUTS = "rollouts"
SAMPLE_KEYS = (
    "step", "split", "group", "prompt", "response", "response_tokens", "token_advantages", "reward",
    "reward_components", "advantage", "finish_reason", "data_source", "ground_truth", "response_length",
)  # fmt: skip


def is_rollout_log_step(step: int, total_steps: int, every: int) -> bool:
    """Every `every` steps (0 = never), the first step and the last."""
    return every > 0 and (step in (1, total_steps) or step % every == 0)


def whole_groups(group_ids: list[int], max_samples: int) -> list[int]:
    """Rows of the first groups (in order of first appearance) that fit whole in `max_samples`; when even the
    first group does not fit, its first `max_samples` rows."""
    rows_by_group: dict[int, list[int]] = {}
    for row, group in enumerate(group_ids):
        rows_by_group.setdefault(group, []).append(row)
    groups = list(rows_by_group.values())
    chosen: list[int] = []
    for rows in groups:
        if len(chosen) + len(rows) > max_samples:
            break
        chosen += rows
    return chosen or (groups[0][:max_samples] if groups else [])


def rollout_samples(
    step: int,
    split: str,
    batch: Trajectories,
    records: list[PromptRecord],
    scored: ScoredBatch,
    tokenizer,
) -> list[dict[str, Any]]:
    """One dict per row of `batch`. `records` and `scored` hold each row's prompt record and reward (in row order).
    `reward` is the trained reward (`batch.rewards`: the score plus any overlong penalty) when set, else the score;
    `token_advantages` are None on tokens that are not trained on (loss mask 0: tool output, masked truncations),
    and `advantage` is the mean over the trained ones (None for validation, which has none)."""
    lengths, group_ids = batch.response_lengths.tolist(), batch.group_ids.tolist()
    prompts, tokens, responses = _decode(batch, tokenizer)
    rewards = batch.rewards.tolist() if batch.rewards is not None else scored.scores
    advantages = batch.advantages.tolist() if batch.advantages is not None else None
    loss_mask = batch.loss_mask.tolist()
    samples = []
    for row, (record, length) in enumerate(zip(records, lengths, strict=True)):
        token_advantages = []
        if advantages:
            pairs = zip(advantages[row][:length], loss_mask[row][:length], strict=True)
            token_advantages = [round(value, 6) if trained else None for value, trained in pairs]
        trained_advantages = [value for value in token_advantages if value is not None]
        advantage = round(sum(trained_advantages) / len(trained_advantages), 6) if trained_advantages else None
        components, reward = scored.sample_components(row), rewards[row]
        if math.isclose(reward, scored.scores[row], rel_tol=1e-6, abs_tol=1e-6):
            reward = scored.scores[row]  # batch.rewards holds it in float32
        else:
            components["overlong_penalty"] = round(reward - scored.scores[row], 6)
        if scored.errors[row] is not None:
            components["reward_error"] = 1.0
        samples.append(
            {
                "step": step,
                "split": split,
                "group": group_ids[row],
                "prompt": prompts[row],
                "response": responses[row],
                "response_tokens": tokens[row],
                "token_advantages": token_advantages,
                "reward": _finite(reward),
                "reward_components": {name: _finite(value) for name, value in components.items()},
                "advantage": _finite(advantage) if advantage is not None else None,
                "finish_reason": batch.finish_reasons[row],
                "data_source": record.data_source,
                "ground_truth": _text(record.ground_truth),
                "response_length": length,
            }
        )
    return samples


def _decode(batch: Trajectories, tokenizer) -> tuple[list[str], list[list[str]], list[str]]:
    """Per row: the prompt (special tokens kept), each response token decoded alone (a character split over
    several byte-level tokens shows as U+FFFD), and the response text as the reward function saw it."""
    lengths = batch.response_lengths.tolist()
    response_ids = [ids[:length] for ids, length in zip(batch.response_ids.tolist(), lengths, strict=True)]
    prompt_ids = [
        [token for token, real in zip(ids, mask, strict=True) if real]
        for ids, mask in zip(batch.prompt_ids.tolist(), batch.prompt_mask.tolist(), strict=True)
    ]
    plain = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
    prompts = tokenizer.batch_decode(prompt_ids, **plain)
    flat = tokenizer.batch_decode([[token] for ids in response_ids for token in ids], **plain)
    tokens, start = [], 0
    for length in lengths:
        tokens.append(flat[start : start + length])
        start += length
    return prompts, tokens, decode_responses(batch, tokenizer)


def drop_rollout_samples_after(run_dir: Path, step: int) -> None:
    """Delete the sample files of steps after `step`: a run resumed from that step's checkpoint writes its own, and
    those of the abandoned attempt must not mix with them."""
    for path in (run_dir / ROLLOUTS).glob("*step_*.jsonl"):
        if int(path.stem.rsplit("_", 1)[1]) > step:
            path.unlink()


def write_rollout_samples(run_dir: Path, step: int, split: str, samples: list[dict[str, Any]]) -> Path:
    """Write `rollouts/step_N.jsonl` (train) or `rollouts/val_step_N.jsonl` (val) atomically; return its path."""
    folder = run_dir / ROLLOUTS
    folder.mkdir(exist_ok=True)
    path = folder / f"{'val_' if split == 'val' else ''}step_{step:06d}.jsonl"
    temporary = folder / f".{path.name}.tmp"
    temporary.write_text("".join(json.dumps(sample, ensure_ascii=False) + "\n" for sample in samples))
    temporary.replace(path)
    return path


def log_rollout_samples(
    run_dir: Path,
    step: int,
    split: str,
    batch: Trajectories,
    records: list[PromptRecord],
    scored: ScoredBatch,
    tokenizer,
    max_samples: int,
) -> Path:
    """Pick whole groups (at most `max_samples` samples) of `batch` and write them; see `rollout_samples`."""
    rows = whole_groups(batch.group_ids.tolist(), max_samples)
    chosen = rollout_samples(
        step, split, batch.select(rows), [records[row] for row in rows], scored.select(rows), tokenizer
    )
    return write_rollout_samples(run_dir, step, split, chosen)


def _finite(value: float) -> float | None:
    """JSON has no NaN or infinity: null, as in metrics.jsonl."""
    value = float(value)
    return value if math.isfinite(value) else None


def _text(ground_truth: Any) -> str | None:
    if ground_truth is None or isinstance(ground_truth, str):
        return ground_truth
    return json.dumps(ground_truth, default=str, ensure_ascii=False)
