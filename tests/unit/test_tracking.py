"""Trackers and rollout samples without the tracker libraries: choices, the metrics they get, which samples are
written and what each holds."""

import json
import math
import sys

import pytest
import torch

import ascent.config.validation
import ascent.trainer.trackers
from ascent.config import ConfigError, load_config
from ascent.data.records import PromptRecord
from ascent.models.tokenizers import build_char_tokenizer
from ascent.rewards.manager import ScoredBatch
from ascent.rollout.trajectories import Trajectories, left_pad, right_pad
from ascent.trainer.rollout_log import (
    SAMPLE_KEYS,
    drop_rollout_samples_after,
    is_rollout_log_step,
    log_rollout_samples,
    rollout_samples,
    whole_groups,
    write_rollout_samples,
)
from ascent.trainer.trackers import build_trackers, mlflow_key
from ascent.trainer.tracking import MetricsLogger


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config([], ["data.synthetic.name=arithmetic", *overrides])
    return str(info.value)


def test_tracker_names_match_the_registry():
    assert tuple(ascent.trainer.trackers.TRACKERS) == ascent.config.validation.TRACKERS


def test_logger_choices_are_checked_with_a_suggestion():
    config = load_config([], ["data.synthetic.name=arithmetic", "trainer.loggers=[wandb,mlflow]"])
    assert config.trainer.loggers == ["wandb", "mlflow"]
    assert "'tensorbord' is not one of: tensorboard, wandb, mlflow. Did you mean 'tensorboard'?" in config_error(
        "trainer.loggers=[tensorbord]"
    )
    assert "'console' is always on" in config_error("trainer.loggers=[console,wandb]")
    assert "names a tracker twice" in config_error("trainer.loggers=[wandb,wandb]")
    assert "trainer.log_rollouts_max must be > 0" in config_error("trainer.log_rollouts_max=0")
    assert "trainer.log_rollouts_every must be >= 0" in config_error("trainer.log_rollouts_every=-1")


def test_a_missing_tracker_library_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    config = load_config([], ["data.synthetic.name=arithmetic", "trainer.loggers=[wandb]"])
    with pytest.raises(ImportError, match=r"trainer.loggers=\[wandb\] needs the wandb package: pip install 'ascent\["):
        build_trackers(config, tmp_path)


def test_mlflow_keys_keep_allowed_characters_only():
    assert mlflow_key("reward/errors/KeyError") == "reward/errors/KeyError"
    assert mlflow_key("reward/pass@k (mean)") == "reward/pass_k _mean_"


class FakeTracker:
    def __init__(self):
        self.logged, self.closed = [], None

    def log(self, metrics, step):
        self.logged.append((step, metrics))

    def log_config(self, config):
        pass

    def close(self, failed=False):
        self.closed = "failed" if failed else "finished"


def test_metrics_logger_sends_finite_metrics_to_trackers_and_closes_them(tmp_path):
    ok, broken = FakeTracker(), FakeTracker()
    with MetricsLogger(tmp_path, 2, progress_bar=False, trackers=[ok]) as logger:
        logger.log(1, {"a": 1.5, "b": math.nan, "c": True})
    assert ok.logged == [(1, {"a": 1.5, "c": 1.0})] and ok.closed == "finished"
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 1, "a": 1.5, "b": None, "c": 1.0}
    with pytest.raises(RuntimeError), MetricsLogger(tmp_path, 2, progress_bar=False, trackers=[broken]):
        raise RuntimeError("a step failed")
    assert broken.closed == "failed"


def test_a_tracker_that_fails_is_switched_off_and_the_run_goes_on(tmp_path, caplog):
    class Outage(FakeTracker):
        def log(self, metrics, step):
            raise ConnectionError("tracking server down")

        def close(self, failed=False):
            raise ConnectionError("still down")

    ok, down = FakeTracker(), Outage()
    with MetricsLogger(tmp_path, 3, progress_bar=False, trackers=[down, ok]) as logger:
        logger.log(1, {"a": 1.0})
        logger.log(2, {"a": 2.0})
    assert [step for step, _ in ok.logged] == [1, 2] and ok.closed == "finished"
    assert "Outage failed to log step 1; it is switched off" in caplog.text
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_a_resumed_run_drops_the_abandoned_attempts_sample_files(tmp_path):
    for name in ("step_000010.jsonl", "val_step_000010.jsonl", "step_000020.jsonl", "val_step_000025.jsonl"):
        write_rollout_samples(tmp_path, 0, "train", [])
        (tmp_path / "rollouts" / "step_000000.jsonl").rename(tmp_path / "rollouts" / name)
    drop_rollout_samples_after(tmp_path, 20)
    assert sorted(path.name for path in (tmp_path / "rollouts").iterdir()) == [
        "step_000010.jsonl", "step_000020.jsonl", "val_step_000010.jsonl",
    ]  # fmt: skip


def test_rollout_samples_are_logged_every_n_steps_and_at_the_first_and_last():
    assert [step for step in range(1, 26) if is_rollout_log_step(step, 25, 10)] == [1, 10, 20, 25]
    assert not any(is_rollout_log_step(step, 25, 0) for step in range(1, 26))


def test_whole_groups_fill_the_budget_in_order():
    assert whole_groups([0, 0, 0, 1, 1, 1, 2, 2, 2], 7) == [0, 1, 2, 3, 4, 5]
    assert whole_groups([0, 1, 0, 1], 4) == [0, 2, 1, 3]  # a group's samples together
    assert whole_groups([5, 5, 5, 6], 2) == [0, 1]  # a group larger than the budget: its first samples
    assert whole_groups([], 4) == []


def test_scored_batch_select_keeps_rows_errors_and_components():
    scored = ScoredBatch([0.0, 1.0, 0.5], components={"b": [1.0, math.nan, 3.0]}, errors=[None, "KeyError", None])
    chosen = scored.select([2, 1])
    assert chosen.scores == [0.5, 1.0] and chosen.errors == [None, "KeyError"]
    assert chosen.error_counts == {"KeyError": 1} and chosen.failed == [False, True]
    assert chosen.sample_components(0) == {"score": 0.5, "b": 3.0}
    assert chosen.sample_components(1) == {"score": 1.0}  # NaN: the sample did not report it


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def make_batch(tokenizer, responses: list[str], group_ids: list[int]) -> Trajectories:
    prompts = [tokenizer("hi", add_special_tokens=False)["input_ids"]] * len(responses)
    encoded = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in responses]
    prompt_ids, prompt_mask = left_pad(prompts, tokenizer.pad_token_id)
    response_ids, response_mask = right_pad(encoded, tokenizer.pad_token_id)
    return Trajectories(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        loss_mask=response_mask.float(),
        rollout_logprobs=torch.zeros(response_ids.shape),
        group_ids=torch.tensor(group_ids),
        finish_reasons=["stop", "length", "stop"],
    )


def test_a_training_sample_holds_its_tokens_advantages_and_reward_parts(tokenizer):
    batch = make_batch(tokenizer, ["12", "7", "abc"], [0, 0, 1])
    batch.rewards = torch.tensor([1.0, -0.25, 0.0])  # sample 1: score 0.5 minus an overlong penalty of 0.75
    batch.advantages = torch.tensor([[1.0, 0.5, 9.0], [-1.0, 9.0, 9.0], [0.25, 0.25, 0.25]])  # 9: padding
    scored = ScoredBatch(scores=[1.0, 0.5, 0.0], components={"acc": [1.0, 0.0, 0.0]}, errors=[None, None, "KeyError"])
    records = [PromptRecord([], "12", "math"), PromptRecord([], "12", "math"), PromptRecord([], [1, 2], "code")]
    samples = rollout_samples(4, "train", batch, records, scored, tokenizer)
    assert all(tuple(sample) == SAMPLE_KEYS for sample in samples)
    first, second, third = samples
    assert first["prompt"] == "hi" and first["response"] == "12" and first["response_tokens"] == ["1", "2"]
    assert first["token_advantages"] == [1.0, 0.5] and first["advantage"] == 0.75 and first["response_length"] == 2
    assert (first["step"], first["split"], first["group"], first["finish_reason"]) == (4, "train", 0, "stop")
    assert first["reward_components"] == {"score": 1.0, "acc": 1.0}
    assert second["reward"] == -0.25
    assert second["reward_components"] == {"score": 0.5, "acc": 0.0, "overlong_penalty": -0.75}
    assert third["reward_components"] == {"score": 0.0, "acc": 0.0, "reward_error": 1.0}
    assert (third["data_source"], third["ground_truth"], third["group"]) == ("code", "[1, 2]", 1)


def test_validation_samples_have_no_advantages_and_files_are_written_whole(tokenizer, tmp_path):
    batch = make_batch(tokenizer, ["1", "22", "333"], [0, 1, 1])
    scored = ScoredBatch(scores=[0.0, 1.0, 0.0], components={}, errors=[None, None, None])
    records = [PromptRecord([], "1", "math")] * 3
    path = log_rollout_samples(tmp_path, 0, "val", batch, records, scored, tokenizer, max_samples=2)
    assert path == tmp_path / "rollouts" / "val_step_000000.jsonl"
    assert [entry.name for entry in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    samples = [json.loads(line) for line in path.read_text().splitlines()]
    assert [sample["group"] for sample in samples] == [0]  # group 1 (2 samples) would not fit with group 0
    assert samples[0]["token_advantages"] == [] and samples[0]["advantage"] is None and samples[0]["reward"] == 0.0
