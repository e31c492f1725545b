"""The typed configuration tree. One source of truth: every key a run reads is a field here.

Names carry units (`prompts_per_step`, `max_response_tokens`). Everything derivable (samples per
step, gradient-accumulation steps, ...) is derived in `schedule.py`, never configured twice.
This module imports no torch, so `ascent train --dry-run` is instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SyntheticTaskConfig:
    """A built-in task generated in memory (no files, no downloads)."""

    name: str | None = None  # e.g. "arithmetic"; None = read data.train_files instead
    num_train: int = 20000
    num_val: int = 200
    min_digits: int = 1
    max_digits: int = 2
    operations: list[str] = field(default_factory=lambda: ["+", "-"])
    question_format: str = "What is {a} {op} {b}? Answer in \\boxed{{}}."  # str.format with a, op, b
    seed: int = 1234


@dataclass
class DataConfig:
    train_files: list[str] = field(default_factory=list)  # Parquet (.parquet) or JSONL (.jsonl/.json) files
    val_files: list[str] = field(default_factory=list)
    val_fraction: float = 0.0  # held out from train_files when val_files is empty
    synthetic: SyntheticTaskConfig = field(default_factory=SyntheticTaskConfig)
    max_prompt_tokens: int = 512  # longer prompts are dropped (and counted) at load
    prompt_template: str | None = (
        None  # Jinja file rewriting the last user message; sees prompt, data_source, extra_info
    )
    apply_chat_template: bool = True  # wrap the prompt in the tokenizer's chat template
    shuffle: bool = True
    seed: int = 0


@dataclass
class ModelConfig:
    path: str = "tiny:llama"  # a Hugging Face model directory, or a built-in preset "tiny:<name>"
    tokenizer_path: str | None = None  # defaults to `path`
    dtype: str = "float32"  # parameter dtype for training: float32 | bfloat16 | float16
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False


@dataclass
class RolloutConfig:
    engine: str = "hf"
    samples_per_prompt: int = 8
    max_response_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    val_temperature: float = 0.0  # 0 = greedy validation
    val_samples_per_prompt: int = 1


@dataclass
class AlgorithmConfig:
    advantage_estimator: str = "grpo"
    std_normalize: bool = True  # GRPO divides by the group std; False = Dr.GRPO
    policy_loss: str = "ppo_clip"
    clip_low: float = 0.2  # ratio floor is 1 - clip_low
    clip_high: float = 0.2  # ratio ceiling is 1 + clip_high
    loss_aggregation: str = "token-mean"
    kl_coef: float = 0.0  # > 0 adds coef * KL(policy || reference) to the loss and loads a reference model
    kl_estimator: str = "k3"  # k1 | k2 | k3
    entropy_coef: float = 0.0  # > 0 subtracts coef * entropy from the loss


@dataclass
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    lr_schedule: str = "constant"  # constant | linear | cosine (after warm-up)
    warmup_steps: int = 0  # trainer steps of linear warm-up
    min_lr_ratio: float = 0.0  # floor of linear/cosine decay, as a fraction of lr
    max_grad_norm: float = 1.0
    mini_batch_size: int = 0  # samples per optimizer update; 0 = all samples of the step (one update)
    micro_batch_size: int = 8  # samples per forward/backward pass
    epochs: int = 1  # passes over each step's samples (PPO epochs)


@dataclass
class RewardConfig:
    function: str | None = None  # "path/to/file.py:function"; None = built-in scorer chosen by data_source
    failure_score: float = 0.0  # score given to a sample whose reward function raised (and counted)


@dataclass
class SFTConfig:
    batch_size: int = 32  # examples per optimizer step in `ascent sft`


@dataclass
class TrainerConfig:
    steps: int = 100
    prompts_per_step: int = 32
    val_every: int = 10  # 0 = never; validation also runs before the first and after the last step
    val_max_prompts: int = 0  # 0 = the whole validation split
    output_dir: str | None = None  # default runs/<run_name>-<timestamp>
    run_name: str = "ascent"
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    backend: str = "local"
    progress_bar: bool = True
    save_final_model: bool = True  # write a Hugging Face directory to <output_dir>/final at the end


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
