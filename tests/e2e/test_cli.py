"""Whole runs through the `ascent` CLI on tiny models."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM

from ascent.cli import main
from ascent.models.builders import build_model
from ascent.models.tokenizers import build_char_tokenizer

DATA = Path(__file__).parent.parent / "data"
TINY = ["model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false"]

pytestmark = pytest.mark.slow


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_grpo_learns_a_trivial_reward_and_changes_every_parameter(tmp_path):
    run_dir = tmp_path / "run"
    code = main(
        [
            "train", *TINY,
            "data.synthetic.name=arithmetic", "data.synthetic.num_val=0",
            f"reward.function={DATA / 'toy_rewards.py'}:count_sevens",
            "rollout.max_response_tokens=8", "rollout.samples_per_prompt=8",
            "trainer.prompts_per_step=8", "trainer.steps=25", "optim.lr=1e-2", "optim.micro_batch_size=32",
            f"trainer.output_dir={run_dir}",
        ]
    )  # fmt: skip
    assert code == 0
    metrics = read_metrics(run_dir)
    rewards = [entry["reward/mean"] for entry in metrics]
    assert len(rewards) == 25
    for entry in metrics:  # every sample ends one way or the other
        reasons = [entry.get(f"rollout/finish_reason/{reason}", 0.0) for reason in ("stop", "length")]
        assert sum(reasons) == pytest.approx(1.0) and reasons[1] == entry["response_length/clip_ratio"]
        assert entry["rollout/prefill_s"] > 0 and entry["rollout/decode_s"] > 0  # the native engine's stages
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.15, f"reward did not rise: {first:.3f} -> {last:.3f}"
    initial = build_model("tiny:llama-micro", build_char_tokenizer(), seed=0)
    trained = AutoModelForCausalLM.from_pretrained(run_dir / "final")
    trained_parameters = dict(trained.named_parameters())
    unchanged = [name for name, p in initial.named_parameters() if torch.equal(p, trained_parameters[name])]
    assert not unchanged, f"parameters that did not train: {unchanged}"


def write_verl_parquet(path: Path) -> Path:
    rows = [json.loads(line) for line in (DATA / "verl_sample.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_verl_parquet_and_reward_file_train_unchanged(tmp_path):
    parquet = write_verl_parquet(tmp_path / "train.parquet")
    run_dir = tmp_path / "run"
    code = main(
        [
            "train", *TINY,
            f"data.train_files=[{parquet}]", f"data.val_files=[{parquet}]",
            f"reward.function={DATA / 'verl_reward.py'}:compute_score",
            "rollout.max_response_tokens=6", "rollout.samples_per_prompt=2",
            "trainer.prompts_per_step=2", "trainer.steps=2", "optim.micro_batch_size=2",
            f"trainer.output_dir={run_dir}",
        ]
    )  # fmt: skip
    assert code == 0
    metrics = read_metrics(run_dir)
    assert [entry["step"] for entry in metrics] == [0, 1, 2]
    step = metrics[1]
    assert step["reward/errors"] == 0
    assert step["reward/has_answer"] >= 0  # the dict component is logged as its own metric
    assert "val/accuracy" in metrics[0] and "val/accuracy" in metrics[2]
    assert (run_dir / "config.yaml").is_file() and (run_dir / "final" / "model.safetensors").is_file()


def test_failing_reward_function_is_counted_and_its_traceback_shown(tmp_path, caplog):
    run_dir = tmp_path / "run"
    code = main(
        [
            "train", *TINY,
            "data.synthetic.name=arithmetic", "data.synthetic.num_val=0",
            f"reward.function={DATA / 'toy_rewards.py'}:sometimes_raises", "reward.failure_score=-1",
            "rollout.max_response_tokens=16", "trainer.prompts_per_step=4", "trainer.steps=2",
            f"trainer.output_dir={run_dir}",
        ]
    )  # fmt: skip
    assert code == 0
    metrics = read_metrics(run_dir)
    errors = sum(entry["reward/errors"] for entry in metrics)
    assert errors > 0
    assert sum(entry.get("reward/errors/RuntimeError", 0) for entry in metrics) == errors
    tracebacks = [r for r in caplog.records if "broken on purpose" in r.getMessage()]
    assert len(tracebacks) == 1 and "Traceback" in tracebacks[0].getMessage()


def test_sft_then_rl_from_the_sft_directory(tmp_path):
    sft_dir, rl_dir = tmp_path / "sft", tmp_path / "rl"
    common = [*TINY, "data.synthetic.name=arithmetic", "data.synthetic.num_val=16", "rollout.max_response_tokens=12"]
    assert main(["sft", *common, "trainer.steps=30", "optim.lr=3e-3", "sft.batch_size=32",
                 "optim.micro_batch_size=32", "trainer.val_every=0", f"trainer.output_dir={sft_dir}"]) == 0  # fmt: skip
    nll = [entry["sft/nll"] for entry in read_metrics(sft_dir) if "sft/nll" in entry]
    assert nll[-1] < 0.5 * nll[0]
    model_dir = sft_dir / "final"
    assert main(["train", *common[1:], f"model.path={model_dir}", "trainer.steps=1", "trainer.prompts_per_step=4",
                 f"trainer.output_dir={rl_dir}"]) == 0  # fmt: skip
    assert read_metrics(rl_dir)[-1]["step"] == 1


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.stepz=3", "Did you mean 'trainer.steps'?"),
        ("data.train_files=[/nonexistent/train.parquet]", "/nonexistent/train.parquet' does not exist"),
    ],
)
def test_bad_input_fails_before_training_with_a_clear_message(tmp_path, capsys, override, expected):
    args = ["train", *TINY, f"trainer.output_dir={tmp_path / 'run'}"]
    if override.startswith("data."):
        args.append("data.synthetic.name=null")
    assert main([*args, override]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
