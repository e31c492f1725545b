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
    engine: str = "native"  # native: lean in-process decode loop | hf: transformers generate (the reference) | vllm
    samples_per_prompt: int = 8
    max_response_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0  # drop tokens less likely than min_p times the most likely one; 0 = off
    stop: list[str] = field(default_factory=list)  # a response ends at the token that completes one of these
    val_temperature: float = 0.0  # 0 = greedy validation
    val_samples_per_prompt: int = 1


@dataclass
class KLConfig:
    """KL(policy || reference); any coef > 0 loads a frozen copy of the initial policy as the reference."""

    coef: float = 0.0  # initial coefficient; 0 = no KL term and no reference model
    estimator: str = "k3"  # k1 | abs | k2 | k3 | k1+ | abs+ | k3+ (straight-through: value of one, gradient of k2)
    placement: str = "loss"  # loss: coef * KL added to the policy loss | reward: subtracted from token rewards
    controller: str = "fixed"  # fixed | adaptive (Ziegler et al. 2019: steer the observed KL to `target`)
    target: float = 0.1  # adaptive: target KL per token
    horizon: int = 10000  # adaptive: samples over which the coefficient can move by a factor of e^0.2


@dataclass
class EntropyConfig:
    """Entropy bonus: coef * entropy is subtracted from the loss."""

    coef: float = 0.0  # the bonus coefficient; with `adaptive`, its starting value
    adaptive: bool = False  # Skywork-OR1 adaptive entropy control: steer entropy towards `target`
    target: float = 0.2  # adaptive: target mean token entropy (nats)
    delta: float = 1e-4  # adaptive: coefficient change per step
    max_coef: float = 0.005  # adaptive: upper bound of the coefficient


@dataclass
class AlgorithmConfig:
    name: str | None = None  # preset (ppo, grpo, dapo, ...; see docs/algorithms.md): sets the keys below
    advantage_estimator: str = "grpo"  # gae | grpo | rloo | reinforce_pp | reinforce_pp_baseline | remax | ...
    std_normalize: bool = True  # grpo/gpg/grpo_passk divide by the group std; False = Dr.GRPO
    gamma: float = 1.0  # discount per token (gae, reinforce_pp)
    lam: float = 1.0  # GAE lambda
    policy_loss: str = "ppo_clip"  # ppo_clip | gspo | cispo | gpg | gmpo | sapo | clip_cov | kl_cov | dro
    clip_low: float = 0.2  # ratio floor is 1 - clip_low
    clip_high: float = 0.2  # ratio ceiling is 1 + clip_high
    dual_clip: float = 3.0  # ppo_clip: bound the loss of negative-advantage tokens at dual_clip * |A|; 0 = off
    sapo_tau_positive: float = 1.0  # sapo: gate temperature for positive advantages
    sapo_tau_negative: float = 1.05  # sapo: gate temperature for negative advantages
    cov_fraction: float = 2e-4  # clip_cov / kl_cov: fraction of trained tokens selected by covariance
    cov_lower: float = 1.0  # clip_cov: covariance window (lower bound) of the candidate tokens
    cov_upper: float = 5.0  # clip_cov: covariance window (upper bound)
    cov_kl_coef: float = 0.1  # kl_cov: coefficient of |log ratio| on the selected tokens
    dro_beta: float = 0.05  # dro: coefficient of the squared log-ratio penalty
    loss_aggregation: str = "token-mean"  # token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | ...
    tis_cap: float = 0.0  # > 0: truncated importance sampling, weight min(p_train / p_rollout, tis_cap)
    kl: KLConfig = field(default_factory=KLConfig)
    entropy: EntropyConfig = field(default_factory=EntropyConfig)
    group_filter: str = "none"  # none | dynamic (DAPO: drop constant groups, sample more) | drop (Skywork-OR1)
    max_generation_rounds: int = 10  # dynamic: rollout rounds per step before training on what there is
    overlong_buffer_fraction: float = 0.0  # DAPO soft overlong penalty over the last fraction of the length budget
    overlong_penalty: float = 1.0  # the penalty at max_response_tokens
    mask_truncated: bool = False  # DAPO overlong filtering: samples that hit the length limit get no loss


@dataclass
class CriticConfig:
    """The value model of PPO (advantage_estimator=gae): the policy's transformer body plus a scalar head."""

    path: str | None = None  # None = initialise the body from model.path; the head always starts fresh
    lr: float = 1e-5
    value_clip: float = 0.5  # clipped value loss: the new value stays within value_clip of the old one


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
    backend: str = "local"  # local: workers in this process | ray: Ray actors, one torch.distributed world
    num_workers: int = 1  # ray: data-parallel workers (ranks) in all, each with its FSDP2 shard of the model
    nnodes: int = 1  # ray: nodes the workers spread over, num_workers / nnodes on each
    gpus_per_node: int = 0  # ray: 0 = workers on CPU (gloo); N = one GPU per worker (NCCL), N workers per node
    worker_timeout_s: float = 600.0  # ray: a worker call or collective that takes longer ends the run
    weight_sync_bucket_mb: int = 256  # ray: full weights reach the rollout engine in buckets of this size
    progress_bar: bool = True
    save_final_model: bool = True  # write a Hugging Face directory to <output_dir>/final at the end
    save_every: int = 0  # checkpoint every N steps and after the last (0 = never); <output_dir>/checkpoints/step_N
    keep_last: int = 0  # keep the newest N checkpoints (0 = all)
    keep_best: str = ""  # also keep the saved checkpoint with the best value of this metric (e.g. val/accuracy)
    keep_best_mode: str = "max"  # max | min: which value of `keep_best` is best
    save_optimizer: bool = True  # False: smaller checkpoints, but a resumed run starts with a fresh optimizer
    resume: str = "auto"  # auto: continue from the newest checkpoint in output_dir, if any | never | a checkpoint dir
    # Console and <output_dir>/metrics.jsonl always; plus any of tensorboard | wandb | mlflow (pip install
    # ascent[tracking]). W&B reads WANDB_MODE (offline: no account needed), WANDB_ENTITY, WANDB_DIR.
    loggers: list[str] = field(default_factory=list)
    project: str = "ascent"  # the W&B project and the MLflow experiment
    mlflow_tracking_uri: str | None = None  # None: $MLFLOW_TRACKING_URI, else sqlite:///<output_dir>/mlflow.db
    log_rollouts_every: int = 10  # write <output_dir>/rollouts/step_N.jsonl every N steps, the first and last (0 = off)
    log_rollouts_max: int = 64  # samples per rollouts file (whole groups first)


@dataclass
class RayConfig:
    address: str | None = None  # an existing cluster (`ray start --head`); None = start one on this machine


@dataclass
class FSDPConfig:
    """How each worker shards its models when trainer.num_workers > 1 (torch FSDP2)."""

    param_dtype: str = "auto"  # compute dtype of the gathered layers: auto = bfloat16 on GPU, float32 on CPU
    reshard_after_forward: bool = True  # free each gathered layer after forward (less memory, gathers again)
    cpu_offload: bool = False  # GPU only: shards, gradients and optimizer state live in CPU memory between uses


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
