"""Checks that run before any model is loaded: choices, ranges and batch arithmetic."""

from __future__ import annotations

import difflib
import re

from ascent.config.errors import ConfigError
from ascent.config.schedule import derive_schedule
from ascent.config.schema import Config
from ascent.models.presets import TINY_PRESETS

# Names the library implements. tests/unit/test_config.py pins these to the registries themselves.
CHOICES: dict[str, tuple[str, ...]] = {
    "rollout.engine": ("hf", "native", "vllm"),
    "algorithm.advantage_estimator": (
        "grpo", "rloo", "opo", "gpg", "grpo_passk", "gae", "reinforce_pp", "reinforce_pp_baseline", "remax",
    ),
    "algorithm.policy_loss": ("ppo_clip", "gspo", "cispo", "gpg", "gmpo", "sapo", "clip_cov", "kl_cov", "dro"),
    "algorithm.loss_aggregation": (
        "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm",
    ),
    "algorithm.kl.estimator": ("k1", "abs", "k2", "k3", "k1+", "abs+", "k3+"),
    "algorithm.kl.placement": ("loss", "reward"),
    "algorithm.kl.controller": ("fixed", "adaptive"),
    "algorithm.group_filter": ("none", "dynamic", "drop"),
    "model.dtype": ("float32", "bfloat16", "float16"),
    "optim.lr_schedule": ("constant", "linear", "cosine"),
    "trainer.backend": ("local", "ray"),
    "trainer.keep_best_mode": ("max", "min"),
    "fsdp.param_dtype": ("auto", "float32", "bfloat16"),
    "data.synthetic.name": ("arithmetic",),
}  # fmt: skip

# trainer.loggers: experiment trackers besides the console and metrics.jsonl, which are always on.
# tests/unit/test_tracking.py pins these to ascent.trainer.trackers.TRACKERS.
TRACKERS = ("tensorboard", "wandb", "mlflow")

# Estimators that compare the samples of one prompt, and so need several samples per prompt.
GROUP_ESTIMATORS = ("grpo", "rloo", "opo", "gpg", "grpo_passk", "reinforce_pp_baseline")


def validate_config(config: Config) -> None:
    """Raise ConfigError naming the first inconsistent key and how to fix it."""
    _check_choices(config)
    _check_ranges(config)
    _check_data(config)
    _check_backend(config)
    _check_checkpoints(config)
    derive_schedule(config)  # raises on batch sizes that do not divide


def _get(config: Config, dotted: str):
    node = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _check_choices(config: Config) -> None:
    for key, options in CHOICES.items():
        value = _get(config, key)
        if value is None and key == "data.synthetic.name":
            continue
        if value not in options:
            close = difflib.get_close_matches(str(value), options, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"{key}={value!r} is not one of: {', '.join(options)}.{hint}")
    if config.model.path.startswith("tiny:") and config.model.path[5:] not in TINY_PRESETS:
        names = ", ".join(f"tiny:{name}" for name in TINY_PRESETS)
        raise ConfigError(f"model.path={config.model.path!r} is not a built-in preset ({names}).")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", config.trainer.device):
        raise ConfigError(f"trainer.device={config.trainer.device!r} must be auto, cpu, cuda or cuda:N.")
    _check_loggers(config.trainer.loggers)


def _check_loggers(loggers: list[str]) -> None:
    for name in loggers:
        if name in ("console", "jsonl", "metrics.jsonl"):
            raise ConfigError(
                f"trainer.loggers: {name!r} is always on; list only extra trackers ({', '.join(TRACKERS)})."
            )
        if name not in TRACKERS:
            close = difflib.get_close_matches(str(name), TRACKERS, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"trainer.loggers: {name!r} is not one of: {', '.join(TRACKERS)}.{hint}")
    if len(set(loggers)) < len(loggers):
        raise ConfigError(f"trainer.loggers={loggers} names a tracker twice.")


def _positive(key: str, value: float, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{key} must be {bound}, got {value}.")


def _check_ranges(config: Config) -> None:
    rollout, algorithm, optim, trainer = config.rollout, config.algorithm, config.optim, config.trainer
    for key, value in [
        ("rollout.samples_per_prompt", rollout.samples_per_prompt),
        ("rollout.max_response_tokens", rollout.max_response_tokens),
        ("rollout.temperature", rollout.temperature),
        ("rollout.val_samples_per_prompt", rollout.val_samples_per_prompt),
        ("trainer.steps", trainer.steps),
        ("trainer.prompts_per_step", trainer.prompts_per_step),
        ("trainer.num_workers", trainer.num_workers),
        ("trainer.worker_timeout_s", trainer.worker_timeout_s),
        ("trainer.weight_sync_bucket_mb", trainer.weight_sync_bucket_mb),
        ("trainer.nnodes", trainer.nnodes),
        ("optim.micro_batch_size", optim.micro_batch_size),
        ("optim.epochs", optim.epochs),
        ("optim.lr", optim.lr),
        ("data.max_prompt_tokens", config.data.max_prompt_tokens),
        ("sft.batch_size", config.sft.batch_size),
        ("trainer.log_rollouts_max", trainer.log_rollouts_max),
    ]:
        _positive(key, value)
    for key, value in [
        ("rollout.val_temperature", rollout.val_temperature),
        ("rollout.top_k", rollout.top_k),
        ("algorithm.kl.coef", algorithm.kl.coef),
        ("algorithm.clip_high", algorithm.clip_high),
        ("algorithm.tis_cap", algorithm.tis_cap),
        ("algorithm.entropy.coef", algorithm.entropy.coef),
        ("algorithm.entropy.delta", algorithm.entropy.delta),
        ("algorithm.overlong_penalty", algorithm.overlong_penalty),
        ("algorithm.dro_beta", algorithm.dro_beta),
        ("algorithm.cov_kl_coef", algorithm.cov_kl_coef),
        ("critic.value_clip", config.critic.value_clip),
        ("optim.warmup_steps", optim.warmup_steps),
        ("optim.max_grad_norm", optim.max_grad_norm),
        ("optim.mini_batch_size", optim.mini_batch_size),
        ("trainer.val_every", trainer.val_every),
        ("trainer.val_max_prompts", trainer.val_max_prompts),
        ("trainer.save_every", trainer.save_every),
        ("trainer.keep_last", trainer.keep_last),
        ("trainer.log_rollouts_every", trainer.log_rollouts_every),
    ]:
        _positive(key, value, allow_zero=True)
    for key, value in [
        ("algorithm.kl.target", algorithm.kl.target),
        ("algorithm.kl.horizon", algorithm.kl.horizon),
        ("algorithm.entropy.target", algorithm.entropy.target),
        ("algorithm.sapo_tau_positive", algorithm.sapo_tau_positive),
        ("algorithm.sapo_tau_negative", algorithm.sapo_tau_negative),
        ("algorithm.max_generation_rounds", algorithm.max_generation_rounds),
        ("critic.lr", config.critic.lr),
    ]:
        _positive(key, value)
    for key, value, low, high in [
        ("rollout.top_p", rollout.top_p, 0, 1),
        ("rollout.min_p", rollout.min_p, 0, 1),
        ("algorithm.clip_low", algorithm.clip_low, 0, 1),
        ("algorithm.gamma", algorithm.gamma, 0, 1),
        ("algorithm.lam", algorithm.lam, 0, 1),
        ("algorithm.cov_fraction", algorithm.cov_fraction, 0, 1),
        ("algorithm.overlong_buffer_fraction", algorithm.overlong_buffer_fraction, 0, 1),
        ("optim.min_lr_ratio", optim.min_lr_ratio, 0, 1),
    ]:
        if not low <= value <= high:
            raise ConfigError(f"{key} must be in [{low}, {high}], got {value}.")
    if rollout.top_p == 0:
        raise ConfigError("rollout.top_p must be > 0 (1 = off).")
    if any(not isinstance(stop, str) or not stop for stop in rollout.stop):
        raise ConfigError(f"rollout.stop must be a list of non-empty strings, got {rollout.stop!r}.")
    if algorithm.dual_clip and algorithm.dual_clip <= 1:
        raise ConfigError(
            f"algorithm.dual_clip must be > 1 (3 is usual) or 0 to switch it off, got {algorithm.dual_clip}."
        )
    if algorithm.entropy.adaptive and algorithm.entropy.max_coef < algorithm.entropy.coef:
        raise ConfigError(
            f"algorithm.entropy.max_coef={algorithm.entropy.max_coef} is below the starting "
            f"algorithm.entropy.coef={algorithm.entropy.coef}."
        )
    if algorithm.kl.controller == "adaptive" and algorithm.kl.coef == 0:
        raise ConfigError("algorithm.kl.controller=adaptive needs a starting algorithm.kl.coef > 0 (e.g. 0.01).")
    samples = trainer.prompts_per_step * rollout.samples_per_prompt
    if algorithm.kl.controller == "adaptive" and algorithm.kl.horizon <= 0.2 * samples:
        raise ConfigError(
            f"algorithm.kl.horizon={algorithm.kl.horizon} must be > 0.2 x the {samples} samples of a step, or one "
            f"update of the adaptive KL controller can turn the coefficient negative; use e.g. {100 * samples}."
        )
    if algorithm.cov_lower >= algorithm.cov_upper:
        raise ConfigError(
            f"algorithm.cov_lower={algorithm.cov_lower} must be below algorithm.cov_upper={algorithm.cov_upper}."
        )
    if len(optim.betas) != 2:
        raise ConfigError(f"optim.betas must be two numbers, e.g. [0.9, 0.999]; got {optim.betas}.")
    needs_groups = algorithm.advantage_estimator in GROUP_ESTIMATORS or algorithm.group_filter != "none"
    if needs_groups and rollout.samples_per_prompt < 2:
        reason = (
            f"advantage_estimator={algorithm.advantage_estimator}"
            if algorithm.advantage_estimator in GROUP_ESTIMATORS
            else f"group_filter={algorithm.group_filter}"
        )
        raise ConfigError(
            f"algorithm.{reason} compares samples of the same prompt, so rollout.samples_per_prompt must be >= 2 "
            f"(got {rollout.samples_per_prompt}); 8 is a common choice."
        )


def _check_checkpoints(config: Config) -> None:
    trainer = config.trainer
    if trainer.keep_best and not trainer.save_every:
        raise ConfigError(
            f"trainer.keep_best={trainer.keep_best!r} keeps the best of the saved checkpoints, but "
            "trainer.save_every=0 saves none: set trainer.save_every (for a val/ metric, a multiple of "
            "trainer.val_every)."
        )


def _check_backend(config: Config) -> None:
    trainer = config.trainer
    if trainer.backend != "ray":
        if trainer.num_workers > 1 or trainer.nnodes > 1:
            raise ConfigError(
                f"trainer.num_workers={trainer.num_workers} and trainer.nnodes={trainer.nnodes} need "
                "trainer.backend=ray: the local backend runs one worker in this process."
            )
        return
    _positive("trainer.gpus_per_node", trainer.gpus_per_node, allow_zero=True)
    if trainer.num_workers % trainer.nnodes:
        raise ConfigError(
            f"trainer.num_workers={trainer.num_workers} does not spread evenly over trainer.nnodes={trainer.nnodes}."
        )
    if trainer.gpus_per_node and trainer.num_workers != trainer.nnodes * trainer.gpus_per_node:
        raise ConfigError(
            f"trainer.num_workers={trainer.num_workers} must be trainer.nnodes x trainer.gpus_per_node "
            f"= {trainer.nnodes * trainer.gpus_per_node}: one worker per GPU."
        )
    if trainer.device.startswith("cuda") and not trainer.gpus_per_node:
        raise ConfigError("trainer.device=cuda with trainer.backend=ray needs trainer.gpus_per_node > 0.")
    if config.fsdp.cpu_offload and not trainer.gpus_per_node:
        raise ConfigError("fsdp.cpu_offload moves GPU memory to the CPU: it needs trainer.gpus_per_node > 0.")


def _check_data(config: Config) -> None:
    data = config.data
    if data.synthetic.name and data.train_files:
        raise ConfigError(
            "Set either data.train_files or data.synthetic.name, not both "
            "(e.g. data.synthetic.name=null to train on your files)."
        )
    if not data.synthetic.name and not data.train_files:
        raise ConfigError(
            "No training data: set data.train_files=[path.parquet] or a built-in task data.synthetic.name=arithmetic."
        )
    if not 0 <= data.val_fraction < 1:
        raise ConfigError(f"data.val_fraction must be in [0, 1), got {data.val_fraction}.")
    if data.val_files and data.val_fraction:
        raise ConfigError("Set either data.val_files or data.val_fraction, not both.")
    synthetic = data.synthetic
    unknown = sorted(set(synthetic.operations) - {"+", "-"})
    if synthetic.name and (unknown or not synthetic.operations):
        raise ConfigError(
            f"data.synthetic.operations must be a non-empty list of '+' and '-', got {synthetic.operations}."
        )
    try:
        synthetic.question_format.format(a=1, op="+", b=2)
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(
            f"data.synthetic.question_format={synthetic.question_format!r} is not a str.format template "
            f"with fields {{a}}, {{op}}, {{b}} ({error!r}); write literal braces as {{{{ }}}}."
        ) from error
    if synthetic.name and not 1 <= synthetic.min_digits <= synthetic.max_digits:
        raise ConfigError(
            "data.synthetic needs 1 <= min_digits <= max_digits, "
            f"got min_digits={synthetic.min_digits}, max_digits={synthetic.max_digits}."
        )
