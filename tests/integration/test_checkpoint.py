"""Checkpoints in local mode: a resumed run continues exactly where the straight run was."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ascent.cli import main
from ascent.trainer.checkpoint import MANIFEST, latest_checkpoint

DATA = Path(__file__).parent.parent / "data"
pytestmark = pytest.mark.slow
# Metrics of wall-clock time, which no two runs share.
WALL_CLOCK = ("timing/", "perf/", "rollout/prefill_s", "rollout/decode_s", "rollout/tokens_per_s")


def arguments(run_dir: Path, *overrides: str) -> list[str]:
    return [
        "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
        "data.synthetic.name=arithmetic", "data.synthetic.num_val=8", "trainer.val_every=2",
        f"reward.function={DATA / 'toy_rewards.py'}:count_sevens", "algorithm.name=ppo", "critic.lr=1e-3",
        "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
        "optim.lr=1e-2", "optim.micro_batch_size=4", "optim.mini_batch_size=8",
        f"trainer.output_dir={run_dir}", *overrides,
    ]  # fmt: skip


def train(run_dir: Path, *overrides: str) -> int:
    return main(["train", *arguments(run_dir, *overrides)])


def killed_run(mode: str, step: int, run_dir: Path, *overrides: str) -> None:
    """Run in a subprocess that SIGKILLs itself at checkpoint `step` (see killed_run.py)."""
    command = [sys.executable, str(Path(__file__).with_name("killed_run.py")), mode, str(step)]
    finished = subprocess.run([*command, *arguments(run_dir, *overrides)], capture_output=True, text=True)
    assert finished.returncode == -signal.SIGKILL, finished.stderr[-3000:]


def assert_same_run(straight: Path, resumed: Path) -> None:
    """Identical per-step metrics (wall-clock ones aside), each step logged once, and identical final weights."""
    expected, actual = metrics(straight), metrics(resumed)
    assert [entry["step"] for entry in actual] == [entry["step"] for entry in expected]
    for here, there in zip(expected, actual, strict=True):
        timing_free = {name: value for name, value in here.items() if not name.startswith(WALL_CLOCK)}
        assert {name: there[name] for name in timing_free} == timing_free, here["step"]
    for part in ("final/model.safetensors", "critic/value_head.safetensors"):
        expected_weights, actual_weights = load_file(straight / part), load_file(resumed / part)
        assert all(torch.equal(actual_weights[name], tensor) for name, tensor in expected_weights.items()), part


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_resumed_run_repeats_the_straight_run_exactly(tmp_path):
    assert train(tmp_path / "straight", "trainer.steps=4") == 0
    resumed = tmp_path / "resumed"
    assert train(resumed, "trainer.steps=2", "trainer.save_every=2") == 0
    assert latest_checkpoint(resumed).name == "step_000002"
    assert train(resumed, "trainer.steps=4", "trainer.save_every=2") == 0  # resume=auto picks up step 2

    assert [entry["step"] for entry in metrics(resumed)] == [0, 1, 2, 3, 4]  # each step once
    assert_same_run(tmp_path / "straight", resumed)
    assert latest_checkpoint(resumed).name == "step_000004"


def test_a_run_killed_with_sigkill_resumes_bit_exactly(tmp_path):
    assert train(tmp_path / "straight", "trainer.steps=6") == 0
    resumed = tmp_path / "resumed"
    killed_run("after-save", 3, resumed, "trainer.steps=6", "trainer.save_every=1")
    assert latest_checkpoint(resumed).name == "step_000003"
    assert not (resumed / "final").exists()
    assert train(resumed, "trainer.steps=6", "trainer.save_every=1") == 0
    assert_same_run(tmp_path / "straight", resumed)


def test_a_crash_during_a_save_leaves_the_previous_checkpoint_to_resume_from(tmp_path):
    killed_run("during-save", 3, tmp_path, "trainer.steps=4", "trainer.save_every=1")
    checkpoints = tmp_path / "checkpoints"
    assert sorted(path.name for path in checkpoints.iterdir()) == [".tmp-step_000003", "step_000001", "step_000002"]
    assert latest_checkpoint(tmp_path).name == "step_000002"
    assert train(tmp_path, "trainer.steps=4", "trainer.save_every=1") == 0
    assert [entry["step"] for entry in metrics(tmp_path)] == [0, 1, 2, 3, 4]
    assert sorted(path.name for path in checkpoints.iterdir()) == [f"step_00000{n}" for n in (1, 2, 3, 4)]


def test_a_damaged_checkpoint_is_named_and_auto_resume_falls_back(tmp_path, capsys, caplog):
    assert train(tmp_path, "trainer.steps=2", "trainer.save_every=1") == 0
    step_two = tmp_path / "checkpoints" / "step_000002"
    manifest = json.loads((step_two / MANIFEST).read_text())["files"]
    assert {"trainer_state.json", "controller_rng.pt", "config.yaml", "policy/worker_state.pt"} <= set(manifest)
    shard = next(name for name in manifest if name.startswith("policy/") and name.endswith(".distcp"))
    data = bytearray((step_two / shard).read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit pattern in the middle of the policy's tensors
    (step_two / shard).write_bytes(bytes(data))

    assert train(tmp_path / "other", "trainer.steps=3", f"trainer.resume={step_two}") == 2
    assert f"{shard} differs from its manifest" in capsys.readouterr().err
    assert latest_checkpoint(tmp_path).name == "step_000001"
    assert f"skipping checkpoint {step_two}" in caplog.text


def test_keep_best_survives_keep_last_and_the_optimizer_can_be_left_out(tmp_path, caplog):
    assert train(
        tmp_path, "trainer.steps=4", "trainer.save_every=1", "trainer.keep_last=1", "trainer.keep_best=reward/mean",
        "trainer.save_optimizer=false",
    ) == 0  # fmt: skip
    rewards = {entry["step"]: entry["reward/mean"] for entry in metrics(tmp_path) if "reward/mean" in entry}
    best_step = max(sorted(rewards), key=lambda step: rewards[step])  # the first of equal values wins
    best = json.loads((tmp_path / "checkpoints" / "best.json").read_text())
    assert (best["step"], best["metric"], best["value"]) == (best_step, "reward/mean", rewards[best_step])
    kept = sorted(path.name for path in (tmp_path / "checkpoints").glob("step_*"))
    assert kept == sorted({f"step_{best_step:06d}", "step_000004"})
    without_optimizer = sum(file.stat().st_size for file in (tmp_path / "checkpoints" / "step_000004").rglob("*"))
    assert train(tmp_path / "full", "trainer.steps=1", "trainer.save_every=1") == 0
    with_optimizer = sum(file.stat().st_size for file in (tmp_path / "full" / "checkpoints" / "step_000001").rglob("*"))
    assert without_optimizer < with_optimizer / 2  # Adam keeps two tensors per parameter
    assert train(tmp_path, "trainer.steps=5", "trainer.save_every=1", "trainer.keep_last=1",
                 "trainer.keep_best=reward/mean", "trainer.save_optimizer=false") == 0  # fmt: skip
    assert "holds no optimizer state (trainer.save_optimizer=false): the optimizer starts fresh" in caplog.text


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
