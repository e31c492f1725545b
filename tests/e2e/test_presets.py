"""Every `algorithm.name` preset trains through the CLI on the tiny model."""

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForCausalLM

from ascent.cli import main
from ascent.config.presets import ALGORITHM_PRESETS
from ascent.models.builders import build_model
from ascent.models.tokenizers import build_char_tokenizer

DATA = Path(__file__).parent.parent / "data"
TINY = ["model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false"]

pytestmark = pytest.mark.slow


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train(run_dir: Path, *overrides: str) -> list[dict]:
    code = main(
        [
            "train", *TINY,
            "data.synthetic.name=arithmetic", "data.synthetic.num_val=0",
            f"reward.function={DATA / 'toy_rewards.py'}:count_sevens",
            "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4",
            "trainer.prompts_per_step=4", "optim.lr=1e-2", "optim.micro_batch_size=8", "critic.lr=1e-2",
            f"trainer.output_dir={run_dir}", *overrides,
        ]
    )  # fmt: skip
    assert code == 0
    return read_metrics(run_dir)


def changed_parameters(run_dir: Path) -> tuple[int, list[str]]:
    initial = build_model("tiny:llama-micro", build_char_tokenizer(), seed=0)
    trained = dict(AutoModelForCausalLM.from_pretrained(run_dir / "final").named_parameters())
    unchanged = [name for name, p in initial.named_parameters() if torch.equal(p, trained[name])]
    return len(trained), unchanged


@pytest.mark.parametrize("preset", sorted(ALGORITHM_PRESETS))
def test_preset_trains_with_finite_losses_and_moves_every_parameter(tmp_path, preset):
    metrics = train(tmp_path / preset, f"algorithm.name={preset}", "trainer.steps=3")
    assert [entry["step"] for entry in metrics] == [1, 2, 3]
    trained = [entry for entry in metrics if "policy/loss" in entry]  # a group filter may drop a whole step
    assert trained, f"{preset}: no step trained"
    for entry in trained:
        for name in ("policy/loss", "policy/pg_loss", "policy/grad_norm", "policy/entropy"):
            assert math.isfinite(entry[name]), (preset, entry["step"], name, entry[name])
    config = (tmp_path / preset / "config.yaml").read_text()
    assert f"name: {preset}" in config
    _, unchanged = changed_parameters(tmp_path / preset)
    assert not unchanged, f"{preset}: parameters that did not train: {unchanged}"


def test_ppo_critic_learns_the_returns(tmp_path):
    metrics = train(tmp_path / "ppo", "algorithm.name=ppo", "trainer.steps=12", "optim.lr=1e-3")
    value_losses = [entry["critic/value_loss"] for entry in metrics]
    assert all(math.isfinite(loss) for loss in value_losses)
    first, last = sum(value_losses[:3]) / 3, sum(value_losses[-3:]) / 3
    assert last < 0.5 * first, f"critic value loss did not fall: {first:.4f} -> {last:.4f}"
    critic_dir = tmp_path / "ppo" / "critic"
    body = AutoModel.from_pretrained(critic_dir)
    head = load_file(critic_dir / "value_head.safetensors")
    assert head["weight"].shape == (1, body.config.hidden_size) and set(head) == {"weight", "bias"}


def test_dynamic_sampling_fills_every_step_with_informative_groups(tmp_path):
    metrics = train(
        tmp_path / "dapo",
        "algorithm.name=dapo",
        "algorithm.overlong_buffer_fraction=0",  # the length penalty would make the constant groups informative
        f"reward.function={DATA / 'toy_rewards.py'}:sevens_on_odd_answers",
        "trainer.prompts_per_step=8",
        "trainer.steps=4",
    )
    for entry in metrics:
        assert entry["filter/trained_groups"] == 8, entry  # a full batch every step
        assert entry["reward/groups_all_equal"] > 0.2  # the even-answer groups were generated and dropped
    assert sum(entry["filter/generation_rounds"] for entry in metrics) > len(metrics)  # extra rounds were needed


def test_drop_filter_trains_only_on_informative_groups_without_resampling(tmp_path):
    metrics = train(
        tmp_path / "drop",
        "algorithm.group_filter=drop",
        f"reward.function={DATA / 'toy_rewards.py'}:sevens_on_odd_answers",
        "trainer.prompts_per_step=8",
        "trainer.steps=3",
    )
    for entry in metrics:
        assert entry["filter/generation_rounds"] == 1
        assert entry["filter/trained_groups"] == pytest.approx(8 * (1 - entry["reward/groups_all_equal"]))


def test_kl_in_the_reward_with_the_adaptive_controller_and_tis(tmp_path):
    metrics = train(
        tmp_path / "kl",
        "algorithm.advantage_estimator=reinforce_pp",
        "algorithm.kl.coef=0.05", "algorithm.kl.placement=reward", "algorithm.kl.controller=adaptive",
        "algorithm.kl.target=0.001", "algorithm.kl.horizon=100",
        "algorithm.tis_cap=2", "trainer.steps=3",
    )  # fmt: skip
    coefs = [entry["kl/coef"] for entry in metrics]
    # step 1: the policy is the reference, observed KL 0 < target: error -0.2 over 16 samples / horizon 100
    assert metrics[0]["kl/token_mean"] == pytest.approx(0.0, abs=1e-6)
    assert coefs[:2] == [0.05, pytest.approx(0.05 * (1 - 0.2 * 16 / 100))]
    assert metrics[-1]["kl/token_mean"] != 0
    for entry in metrics:
        assert 0 <= entry["rollout/mismatch_kl"] < 1e-4 and math.isfinite(entry["policy/loss"])


def test_adaptive_entropy_control_raises_the_coefficient_while_entropy_is_below_target(tmp_path):
    metrics = train(
        tmp_path / "entropy",
        "algorithm.name=skywork_or1",
        "algorithm.group_filter=none",  # every step trains, so the controller steps every time
        "algorithm.entropy.target=100",
        "trainer.steps=3",
    )
    assert [entry["entropy/coef"] for entry in metrics] == pytest.approx([0.0, 1e-4, 2e-4])
    assert all(entry["entropy/bonus_active"] == 1 for entry in metrics)


def test_overlong_filtering_gives_truncated_samples_no_gradient(tmp_path):
    # 2 response tokens: the random tiny model never stops that early, so every sample is truncated
    metrics = train(
        tmp_path / "mask", "algorithm.mask_truncated=true", "rollout.max_response_tokens=2", "trainer.steps=2"
    )
    for entry in metrics:
        assert entry["response_length/clip_ratio"] == 1.0
        assert entry["policy/grad_norm"] == 0.0 and entry["advantages/abs_mean"] == 0.0
