"""Config loading: key and type checks with suggestions, precedence, derived schedule, CLI dry run."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

import ascent.algorithms.advantages
import ascent.algorithms.kl
import ascent.algorithms.losses
import ascent.models.builders
import ascent.rollout.engine
from ascent.config import ConfigError, derive_schedule, load_config, to_yaml
from ascent.config.loader import parse_override
from ascent.config.presets import ALGORITHM_PRESETS
from ascent.config.schema import Config, OptimConfig, RolloutConfig
from ascent.config.validation import CHOICES

REPO_ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = "data.synthetic.name=arithmetic"  # the smallest valid config needs some training data


def load(*overrides: str, paths=()):
    return load_config(list(paths), [SYNTHETIC, *overrides])


def config_error(*overrides: str, paths=()) -> str:
    with pytest.raises(ConfigError) as info:
        load(*overrides, paths=paths)
    return str(info.value)


# ---- unknown keys and wrong types ---------------------------------------------------------------------------


def test_unknown_leaf_key_names_the_nearest_valid_key():
    message = config_error("trainer.stepz=3")
    assert "'trainer.stepz'" in message
    assert "Did you mean 'trainer.steps'?" in message


def test_key_in_the_wrong_section_suggests_the_right_section():
    message = config_error("optim.samples_per_prompt=4")
    assert "Did you mean 'rollout.samples_per_prompt'?" in message


def test_misspelt_section_suggests_the_full_key():
    message = config_error("trainr.steps=3")
    assert "Unknown config key 'trainr.steps'" in message
    assert "Did you mean 'trainer.steps'?" in message


def test_unknown_section_with_a_known_leaf_suggests_that_leaf():
    assert "Did you mean 'optim.lr'?" in config_error("xyz.lr=1")


def test_suggested_mini_batch_sizes_are_multiples_of_the_micro_batch():
    message = config_error(*BATCH, "optim.mini_batch_size=12", "optim.micro_batch_size=8")
    assert "Use one of [8, 16, 32]" in message


def test_unknown_key_in_a_yaml_file_is_reported_too(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("rollout:\n  temperatur: 0.5\n")
    assert "Did you mean 'rollout.temperature'?" in config_error(paths=[path])


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.steps=abc", "'trainer.steps' must be int, got 'abc' (str)"),
        ("trainer.steps=2.5", "'trainer.steps' must be int, got 2.5 (float)"),
        ("trainer.steps=true", "'trainer.steps' must be int, got True (bool)"),
        ("rollout.temperature=hot", "'rollout.temperature' must be float, got 'hot' (str)"),
        ("trainer=3", "'trainer' must be a mapping, got int"),
    ],
)
def test_wrong_type_names_the_key_and_the_value(override, expected):
    assert expected in config_error(override)


def test_values_are_coerced_where_unambiguous():
    config = load("optim.lr=1", "trainer.run_name=42", "data.synthetic.name=null", "data.train_files=a.parquet")
    assert config.optim.lr == 1.0 and isinstance(config.optim.lr, float)
    assert config.trainer.run_name == "42"
    assert config.data.synthetic.name is None
    assert config.data.train_files == ["a.parquet"]  # a single string becomes a one-item list


def test_exponent_without_dot_is_a_float():
    assert load("optim.lr=1e-3").optim.lr == pytest.approx(1e-3)


def test_override_without_equals_sign_is_rejected():
    with pytest.raises(ConfigError, match=r"dotted\.key=value"):
        parse_override("trainer.steps")
    assert parse_override("a.b.c=[1, 2]") == {"a": {"b": {"c": [1, 2]}}}


# ---- precedence ---------------------------------------------------------------------------------------------


def test_precedence_defaults_then_files_left_to_right_then_overrides(tmp_path):
    first = tmp_path / "first.yaml"
    first.write_text(
        "data:\n  synthetic: {name: arithmetic, num_train: 50}\n"
        "trainer: {steps: 5, prompts_per_step: 4, run_name: first}\n"
        "optim: {lr: 0.5}\n"
    )
    second = tmp_path / "second.yaml"
    second.write_text("data:\n  synthetic: {num_val: 7}\ntrainer: {steps: 7, run_name: second}\n")

    config = load_config([first, second], ["trainer.steps=9"])

    assert config.trainer.steps == 9  # override beats both files
    assert config.trainer.run_name == "second"  # later file beats earlier file
    assert config.trainer.prompts_per_step == 4  # earlier file survives a deep merge with the later one
    assert config.optim.lr == 0.5
    assert (config.data.synthetic.name, config.data.synthetic.num_train, config.data.synthetic.num_val) == (
        "arithmetic",
        50,
        7,
    )
    assert config.rollout.temperature == RolloutConfig().temperature  # untouched key keeps its default
    assert config.optim.micro_batch_size == OptimConfig().micro_batch_size

    reversed_order = load_config([second, first])
    assert (reversed_order.trainer.steps, reversed_order.trainer.run_name) == (5, "first")


def test_resolved_yaml_reloads_to_the_same_config(tmp_path):
    config = load("trainer.steps=3", "rollout.samples_per_prompt=4", "optim.betas=[0.8, 0.9]")
    path = tmp_path / "resolved.yaml"
    path.write_text(to_yaml(config))
    assert load_config([path]) == config


def test_missing_config_file_is_named(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_config([missing])
    assert str(missing) in str(info.value)


def test_config_file_that_is_not_a_mapping_is_rejected(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    assert "must hold a mapping" in config_error(paths=[path])


# ---- batch arithmetic ---------------------------------------------------------------------------------------

BATCH = ["trainer.prompts_per_step=4", "rollout.samples_per_prompt=8"]  # 32 samples per step


def test_derived_schedule_numbers():
    config = load(*BATCH, "optim.mini_batch_size=16", "optim.micro_batch_size=4", "optim.epochs=2", "trainer.steps=10")
    schedule = derive_schedule(config)
    assert schedule.samples_per_step == 32
    assert schedule.mini_batch_size == 16
    assert schedule.mini_batches_per_epoch == 2
    assert schedule.micro_batch_size == 4
    assert schedule.grad_accumulation_steps == 4
    assert schedule.updates_per_step == 4
    assert schedule.total_steps == 10
    text = schedule.describe()
    assert "samples per step          32 (4 prompts x 8 samples)" in text
    assert "4 per step, 40 in 10 steps" in text


def test_mini_batch_size_zero_means_one_update_per_step():
    schedule = derive_schedule(load(*BATCH, "optim.mini_batch_size=0", "optim.micro_batch_size=8"))
    assert (schedule.mini_batch_size, schedule.mini_batches_per_epoch, schedule.updates_per_step) == (32, 1, 1)
    assert schedule.grad_accumulation_steps == 4


def test_mini_batch_not_dividing_samples_lists_valid_values():
    message = config_error(*BATCH, "optim.mini_batch_size=12", "optim.micro_batch_size=4")
    assert "optim.mini_batch_size=12 does not divide the 32 samples" in message
    assert "trainer.prompts_per_step=4 x rollout.samples_per_prompt=8" in message
    assert "Use one of [4, 8, 16, 32], or set 0 for one update per step." in message


def test_micro_batch_not_dividing_mini_batch_lists_valid_values():
    message = config_error(*BATCH, "optim.mini_batch_size=16", "optim.micro_batch_size=6")
    assert "optim.micro_batch_size=6 does not divide optim.mini_batch_size=16" in message
    assert "Use one of [1, 2, 4, 8, 16]." in message


# ---- choices, ranges and data -------------------------------------------------------------------------------


def test_grpo_needs_more_than_one_sample_per_prompt():
    message = config_error("rollout.samples_per_prompt=1")
    assert "rollout.samples_per_prompt must be >= 2 (got 1)" in message


def test_bad_choice_suggests_the_nearest_option():
    message = config_error("rollout.engine=hff")
    assert "rollout.engine='hff' is not one of: hf, native, vllm. Did you mean 'hf'?" in message
    assert "Did you mean 'float32'?" in config_error("model.dtype=float")


def test_unknown_tiny_preset_lists_the_presets():
    message = config_error("model.path=tiny:gpt")
    assert "tiny:llama" in message and "tiny:qwen2" in message


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.steps=0", "trainer.steps must be > 0"),
        ("optim.lr=-0.1", "optim.lr must be > 0"),
        ("rollout.top_p=1.5", "rollout.top_p must be in [0, 1], got 1.5"),
        ("rollout.min_p=-0.1", "rollout.min_p must be in [0, 1], got -0.1"),
        ("rollout.stop=['</answer>', '']", "rollout.stop must be a list of non-empty strings"),
        ("optim.betas=[0.9]", "optim.betas must be two numbers"),
        ("trainer.device=gpu", "trainer.device='gpu'"),
        ("algorithm.dual_clip=0.5", "algorithm.dual_clip must be > 1 (3 is usual) or 0"),
        ("algorithm.gamma=1.5", "algorithm.gamma must be in [0, 1]"),
        ("algorithm.kl.controller=adaptive", "needs a starting algorithm.kl.coef > 0"),
        ("algorithm.cov_lower=6", "algorithm.cov_lower=6.0 must be below algorithm.cov_upper=5.0"),
        ("algorithm.kl.placement=rewards", "Did you mean 'reward'?"),
        ("algorithm.loss_aggregation=mean", "not one of: token-mean, token-sum, seq-mean-token-sum,"),
        ("algorithm.critic=1", "Unknown config key 'algorithm.critic'. Did you mean 'critic'?"),
        ("algorithm.lr=1", "Unknown config key 'algorithm.lr'. Did you mean 'optim.lr'?"),
    ],
)
def test_out_of_range_values_name_the_key(override, key):
    assert key in config_error(override)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (("trainer.num_workers=3", "trainer.nnodes=2"), "trainer.num_workers=3 does not spread evenly"),
        (("trainer.num_workers=4", "trainer.gpus_per_node=8"), "must be trainer.nnodes x trainer.gpus_per_node = 8"),
        (("trainer.device=cuda",), "needs trainer.gpus_per_node > 0"),
        (("fsdp.cpu_offload=true",), "fsdp.cpu_offload moves GPU memory to the CPU"),
        (("fsdp.param_dtype=fp16",), "fsdp.param_dtype='fp16' is not one of: auto, float32, bfloat16"),
        (("trainer.num_workers=3",), "trainer.num_workers=3 must divide the mini-batch of 32 samples"),
        (("trainer.nnodes=0",), "trainer.nnodes must be > 0"),
    ],
)
def test_ray_settings_are_checked_before_anything_starts(overrides, expected):
    ray = ("trainer.backend=ray", "trainer.num_workers=2", "trainer.prompts_per_step=4", "rollout.samples_per_prompt=8")
    assert expected in config_error(*ray, *overrides)


def test_several_workers_need_the_ray_backend():
    assert "need trainer.backend=ray" in config_error("trainer.num_workers=2")


def test_a_mini_batch_share_per_rank_must_hold_whole_micro_batches():
    error = config_error("trainer.backend=ray", "trainer.num_workers=2", "optim.mini_batch_size=8",
                         "optim.micro_batch_size=8")  # fmt: skip
    assert "optim.micro_batch_size=8 does not divide the 4 samples per rank of a mini-batch" in error


# ---- algorithm presets --------------------------------------------------------------------------------------


def test_preset_sets_its_documented_keys():
    config = load("algorithm.name=dapo")
    algorithm = config.algorithm
    assert (algorithm.clip_low, algorithm.clip_high, algorithm.group_filter) == (0.2, 0.28, "dynamic")
    assert algorithm.overlong_buffer_fraction == 0.2 and algorithm.kl.coef == 0


def test_preset_replaces_algorithm_keys_set_before_it_and_yields_to_keys_after_it(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("algorithm:\n  advantage_estimator: rloo\n  clip_high: 0.5\n  group_filter: drop\n")
    ppo = load("algorithm.name=ppo", paths=[recipe]).algorithm
    assert (ppo.advantage_estimator, ppo.clip_high, ppo.group_filter) == ("gae", 0.2, "none")
    tuned = load("algorithm.name=ppo", "algorithm.clip_high=0.3", paths=[recipe]).algorithm
    assert (tuned.advantage_estimator, tuned.clip_high) == ("gae", 0.3)
    recipe.write_text("algorithm:\n  name: grpo\n  kl:\n    coef: 0.0\n")  # keys next to the name win
    grpo = load(paths=[recipe]).algorithm
    assert grpo.kl.coef == 0.0 and grpo.loss_aggregation == "seq-mean-token-mean"


def test_unknown_preset_suggests_the_nearest():
    assert "algorithm.name='dapoo' is not one of" in config_error("algorithm.name=dapoo")
    assert "Did you mean 'dapo'?" in config_error("algorithm.name=dapoo")


def test_every_preset_loads_and_validates():
    for name in ALGORITHM_PRESETS:
        assert load(f"algorithm.name={name}").algorithm.name == name


def test_adaptive_kl_horizon_must_keep_the_coefficient_positive():
    message = config_error(
        *BATCH, "algorithm.kl.coef=0.1", "algorithm.kl.controller=adaptive", "algorithm.kl.horizon=5"
    )
    assert "algorithm.kl.horizon=5 must be > 0.2 x the 32 samples" in message


def test_group_filter_needs_several_samples_per_prompt():
    message = config_error("algorithm.advantage_estimator=reinforce_pp", "algorithm.group_filter=dynamic",
                           "rollout.samples_per_prompt=1")  # fmt: skip
    assert "algorithm.group_filter=dynamic compares samples of the same prompt" in message


def test_no_training_data_is_an_error():
    with pytest.raises(ConfigError) as info:
        load_config([], [])  # defaults: no synthetic task and no train_files
    assert "data.train_files" in str(info.value) and "data.synthetic.name=arithmetic" in str(info.value)


def test_both_train_files_and_synthetic_task_is_an_error():
    assert "not both" in config_error("data.train_files=[a.parquet]")


def test_train_files_alone_are_enough():
    config = load_config([], ["data.train_files=[a.parquet, b.jsonl]"])
    assert config.data.train_files == ["a.parquet", "b.jsonl"]
    assert isinstance(config, Config)


def test_choices_match_the_registries():
    assert CHOICES["algorithm.advantage_estimator"] == tuple(ascent.algorithms.advantages.ADVANTAGE_ESTIMATORS)
    assert CHOICES["algorithm.policy_loss"] == tuple(ascent.algorithms.losses.POLICY_LOSSES)
    assert CHOICES["algorithm.kl.estimator"] == ascent.algorithms.kl.KL_ESTIMATORS
    assert CHOICES["algorithm.loss_aggregation"] == ascent.algorithms.losses.AGGREGATIONS
    assert CHOICES["model.dtype"] == tuple(ascent.models.builders.DTYPES)
    assert CHOICES["rollout.engine"] == tuple(ascent.rollout.engine.ROLLOUT_ENGINES)


# ---- command line -------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ascent.cli", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )


def test_cli_dry_run_prints_the_schedule_quickly():
    start = time.perf_counter()
    result = run_cli("train", "examples/demo.yaml", "--dry-run")
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    assert "samples per step" in result.stdout
    assert "512 (64 prompts x 8 samples)" in result.stdout  # examples/demo.yaml: 64 prompts x 8 samples
    assert elapsed < 2.0


def test_cli_config_error_exits_2_and_names_the_key():
    result = run_cli("train", "examples/demo.yaml", "trainer.stepz=3")
    assert result.returncode == 2
    assert "trainer.steps" in result.stderr
    assert result.stdout == ""


def test_config_and_cli_import_no_torch():
    code = "import sys, ascent.config, ascent.cli; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
