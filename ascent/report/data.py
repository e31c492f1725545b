"""What the report shows, read from a run directory: metric series, the charts to draw, rollout samples.

A run directory holds `metrics.jsonl` (one JSON object per step), `config.yaml`, and rollout samples in
`rollouts/step_{N:06d}.jsonl` (train) and `rollouts/val_step_{N:06d}.jsonl` (validation), one JSON object per
sample. Everything here is plain data (dicts, lists, floats, strings) ready to embed as JSON.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import yaml

# Big runs would make a page of gigabytes: the report embeds the first samples of each step (whole groups, in
# file order; the trainer writes at most trainer.log_rollouts_max = 64) and, past that many steps, evenly spaced
# steps including the first and the last. Long responses lower the step count further, so that a split holds about
# MAX_TOKENS_PER_SPLIT response tokens (~20 MB of page), judged by its newest step.
MAX_SAMPLES_PER_STEP = 64
MAX_ROLLOUT_STEPS = 100
MAX_TOKENS_PER_SPLIT = 1_000_000

# One chart per group that has at least one of its metrics in the run, in this order.
CHART_GROUPS: list[tuple[str, list[str]]] = [
    ("Reward and accuracy", ["reward/mean", "reward/accuracy", "val/reward", "val/accuracy"]),
    ("SFT loss (NLL per token)", ["sft/nll", "val/nll"]),
    ("KL", ["policy/kl_ref", "kl/token_mean", "policy/approx_kl"]),
    ("Entropy", ["policy/entropy", "entropy/observed"]),
    ("Response length (tokens)", ["response_length/mean", "response_length/max", "val/response_length"]),
    ("Clip fraction", ["policy/clip_frac_low", "policy/clip_frac_high", "policy/dual_clip_frac"]),
    ("Gradient norm", ["policy/grad_norm", "critic/grad_norm"]),
]
# reward/<name> and val/<name> that are not a component a reward function returned.
_REWARD_STATS = {"mean", "std", "accuracy", "errors", "groups_all_equal", "greedy_baseline"}
_REWARD_STATS |= {"reward", "response_length"}  # val/reward, val/response_length
# The stages of a step in the order they run, stacked. timing/step is their total and validation runs apart from
# them on some steps only: both are lines over the stack.
_STAGE_ORDER = ["rollout", "score", "logprobs", "update", "sync_weights"]
_TIMING_LINES = ["timing/step", "timing/validation"]
_ROLLOUT_FILE = re.compile(r"^(val_)?step_(\d+)\.jsonl$")


def read_metrics(path: Path) -> dict:
    """{"steps": [int], "series": {metric: [float | None, one per step]}}. A step logged twice (a resumed run
    rewrote it) keeps its last line; a cut last line (a killed run) is skipped."""
    by_step: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("step"), int):
                by_step[entry["step"]] = entry
    steps = sorted(by_step)
    names = sorted({name for entry in by_step.values() for name in entry} - {"step"})
    series = {name: [_number(by_step[step].get(name)) for step in steps] for name in names}
    logged = {name: values for name, values in series.items() if any(value is not None for value in values)}
    return {"steps": steps, "series": logged}


def chart_specs(names: list[str]) -> list[dict]:
    """The charts to draw for these metric names: {"title", "metrics", "stacked", "lines"}. The time per stage
    stacks the stages of a step, with its total (timing/step) and the validation time as lines over them."""
    present = set(names)
    charts = [
        {"title": title, "metrics": [name for name in metrics if name in present], "stacked": False, "lines": []}
        for title, metrics in CHART_GROUPS
        if any(name in present for name in metrics)
    ]
    grouped = {name for _, metrics in CHART_GROUPS for name in metrics}
    components = [
        name
        for name in names
        if name.count("/") == 1
        and name.split("/")[0] in ("reward", "val")
        and name.split("/")[1] not in _REWARD_STATS
        and name not in grouped  # e.g. val/nll, charted with the SFT loss
    ]
    if components:
        charts.insert(1, {"title": "Reward components", "metrics": components, "stacked": False, "lines": []})
    stages = sorted(
        (name for name in names if name.startswith("timing/") and name not in _TIMING_LINES),
        key=lambda name: (_STAGE_ORDER.index(name[7:]) if name[7:] in _STAGE_ORDER else len(_STAGE_ORDER), name),
    )
    lines = [name for name in _TIMING_LINES if name in present]
    if stages:
        charts.append({"title": "Time per stage (s)", "metrics": stages, "stacked": True, "lines": lines})
    return charts


def read_rollouts(run_dir: Path, max_samples_per_step: int, max_rollout_steps: int) -> dict:
    """{"train": [step], "val": [step], "num_steps": {"train": int, "val": int}} where each step is
    {"step", "num_samples" (in the file), "samples" (the first `max_samples_per_step`)}."""
    files: dict[str, list[tuple[int, Path]]] = {"train": [], "val": []}
    folder = run_dir / "rollouts"
    if folder.is_dir():
        for path in folder.iterdir():
            match = _ROLLOUT_FILE.match(path.name)
            if match:
                files["val" if match.group(1) else "train"].append((int(match.group(2)), path))
    result: dict = {"num_steps": {split: len(found) for split, found in files.items()}}
    for split, found in files.items():
        result[split] = _read_split(sorted(found), max_samples_per_step, max_rollout_steps)
    return result


def run_summary(run_dir: Path) -> dict:
    """The run's name, directory and resolved config (text, plus a few headline keys)."""
    config_path = run_dir / "config.yaml"
    text = config_path.read_text() if config_path.exists() else ""
    try:
        config = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        config = {}
    sections = {key: value for key, value in config.items() if isinstance(value, dict)}
    algorithm, rollout, trainer = (sections.get(name, {}) for name in ("algorithm", "rollout", "trainer"))
    headline = {
        "model": sections.get("model", {}).get("path"),
        "algorithm": algorithm.get("name") or algorithm.get("advantage_estimator"),
        "policy loss": algorithm.get("policy_loss"),
        "steps": trainer.get("steps"),
        "prompts per step": trainer.get("prompts_per_step"),
        "samples per prompt": rollout.get("samples_per_prompt"),
    }
    return {
        "name": run_dir.name,  # the run name and its start time (trainer.run_name alone is the same for every run)
        "dir": str(run_dir),
        "config": text,
        "headline": {k: str(v) for k, v in headline.items() if v is not None},
    }


def is_correct(reward: float | None, components: dict[str, float | None]) -> bool:
    """The trainer's rule (reward/accuracy): a component named `accuracy` when the reward function returns one,
    else a score above 0 (the score before shaping such as the overlong penalty)."""
    accuracy = components.get("accuracy")
    if accuracy is not None:
        return accuracy > 0.5
    score = components.get("score", reward)
    return score is not None and score > 0


def _read_split(files: list[tuple[int, Path]], max_samples_per_step: int, max_steps: int) -> list[dict]:
    """The steps of one split that go in the page, read. The newest is read first: its size sets how many fit."""
    if not files:
        return []
    newest = _read_step(*files[-1], max_samples_per_step)
    num_tokens = sum(len(sample["response_tokens"]) for sample in newest["samples"])
    chosen = _spread(files, min(max_steps, max(1, MAX_TOKENS_PER_SPLIT // max(num_tokens, 1))))
    return [_read_step(step, path, max_samples_per_step) for step, path in chosen[:-1]] + [newest]


def _read_step(step: int, path: Path, max_samples: int) -> dict:
    samples, num_samples = [], 0
    with path.open() as lines:
        for line in lines:
            if not line.strip():
                continue
            num_samples += 1
            if len(samples) < max_samples:
                try:
                    samples.append(_sample(json.loads(line)))
                except (json.JSONDecodeError, TypeError, ValueError, AttributeError):
                    num_samples -= 1  # a cut line: the run was killed while writing it
    return {"step": step, "num_samples": num_samples, "samples": samples}


def _sample(raw: dict) -> dict:
    components = {str(name): _number(value) for name, value in (raw.get("reward_components") or {}).items()}
    reward = _number(raw.get("reward"))
    return {
        "group": raw.get("group"),
        "prompt": str(raw.get("prompt", "")),
        "response": str(raw.get("response", "")),
        "response_tokens": [str(token) for token in raw.get("response_tokens") or []],
        "token_advantages": [_number(value, digits=4) for value in raw.get("token_advantages") or []],
        "reward": reward,
        "reward_components": components,
        "advantage": _number(raw.get("advantage")),
        "finish_reason": raw.get("finish_reason"),
        "data_source": raw.get("data_source"),
        "ground_truth": None if raw.get("ground_truth") is None else str(raw["ground_truth"]),
        "response_length": raw.get("response_length"),
        "correct": is_correct(reward, components),
    }


def _spread(items: list, limit: int) -> list:
    """At most `limit` items, evenly spaced, keeping the first and the last."""
    if len(items) <= limit:
        return items
    if limit <= 1:
        return items[-limit:] if limit else []
    return [items[round(i * (len(items) - 1) / (limit - 1))] for i in range(limit)]


def _number(value, digits: int | None = None) -> float | None:
    """A finite float, or None (JSON has no NaN or infinity; metrics.jsonl already writes them as null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), digits) if digits is not None else value
