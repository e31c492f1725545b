"""Checkpoints in local mode: a resumed run continues exactly where the straight run was."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ascent.cli import main
from ascent.trainer.checkpoint import latest_checkpoint

DATA = Path(__file__).parent.parent / "data"
pytestmark = pytest.mark.slow
# Metrics of wall-clock time, which no two runs share.
WALL_CLOCK = ("timing/", "perf/", "rollout/prefill_s", "rollout/decode_s", "rollout/tokens_per_s")


def train(run_dir: Path, *overrides: str) -> int:
    return main(
        [
            "train", "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
            "data.synthetic.name=arithmetic", "data.synthetic.num_val=8", "trainer.val_every=2",
            f"reward.function={DATA / 'toy_rewards.py'}:count_sevens", "algorithm.name=ppo", "critic.lr=1e-3",
            "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
            "optim.lr=1e-2", "optim.micro_batch_size=4", "optim.mini_batch_size=8",
            f"trainer.output_dir={run_dir}", *overrides,
        ]
    )  # fmt: skip


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_resumed_run_repeats_the_straight_run_exactly(tmp_path):
    assert train(tmp_path / "straight", "trainer.steps=4") == 0
    resumed = tmp_path / "resumed"
    assert train(resumed, "trainer.steps=2", "trainer.save_every=2") == 0
    assert latest_checkpoint(resumed).name == "step_000002"
    assert train(resumed, "trainer.steps=4", "trainer.save_every=2") == 0  # resume=auto picks up step 2

    straight, again = metrics(tmp_path / "straight"), metrics(resumed)
    assert [entry["step"] for entry in again] == [0, 1, 2, 3, 4]  # each step once
    for here, there in zip(straight, again, strict=True):
        timing_free = {name: value for name, value in here.items() if not name.startswith(WALL_CLOCK)}
        assert {name: there[name] for name in timing_free} == timing_free, here["step"]
    for part in ("final/model.safetensors", "critic/value_head.safetensors"):
        expected, actual = load_file(tmp_path / "straight" / part), load_file(resumed / part)
        assert all(torch.equal(actual[name], tensor) for name, tensor in expected.items()), part
    assert latest_checkpoint(resumed).name == "step_000004"


def test_resume_refuses_a_config_that_changes_the_computation(tmp_path, capsys):
    assert train(tmp_path, "trainer.steps=1", "trainer.save_every=1") == 0
    assert train(tmp_path, "trainer.steps=2", "optim.lr=5e-3", "algorithm.clip_high=0.3") == 2
    error = capsys.readouterr().err
    assert "algorithm.clip_high: 0.2 in the checkpoint, 0.3 now" in error and "optim.lr" in error
    assert "trainer.steps" not in error  # a longer run is a change a resume allows
    # a fresh run may not start among another run's checkpoints: keep_last would delete its own first
    assert train(tmp_path, "trainer.steps=2", "optim.lr=5e-3", "trainer.resume=never") == 2
    assert "holds another run's checkpoints" in capsys.readouterr().err


def test_keep_last_and_an_unfinished_save_are_handled(tmp_path):
    assert train(tmp_path, "trainer.steps=3", "trainer.save_every=1", "trainer.keep_last=2") == 0
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == ["step_000002", "step_000003"]
    unfinished = tmp_path / "checkpoints" / ".tmp-step_000004"  # what a crash in the middle of a save leaves
    unfinished.mkdir()
    (unfinished / "trainer_state.json").write_text("{broken")
    assert latest_checkpoint(tmp_path).name == "step_000003"
    assert train(tmp_path, "trainer.steps=4", "trainer.save_every=1", "trainer.keep_last=2") == 0
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == ["step_000003", "step_000004"]


def test_resume_from_an_explicit_checkpoint_and_a_missing_one(tmp_path, capsys):
    assert train(tmp_path / "a", "trainer.steps=2", "trainer.save_every=1") == 0
    step_one = tmp_path / "a" / "checkpoints" / "step_000001"
    assert train(tmp_path / "b", "trainer.steps=2", f"trainer.resume={step_one}") == 0
    assert [entry["step"] for entry in metrics(tmp_path / "b")] == [2]  # started after step 1
    assert train(tmp_path / "c", "trainer.steps=2", f"trainer.resume={tmp_path / 'nowhere'}") == 2
    assert "is not a checkpoint directory" in capsys.readouterr().err
