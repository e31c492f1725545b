"""The derived batch schedule of one training step: what the config implies, printed at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from ascent.config.errors import ConfigError
from ascent.config.schema import Config


@dataclass(frozen=True)
class Schedule:
    prompts_per_step: int
    samples_per_prompt: int
    samples_per_step: int
    mini_batch_size: int  # samples per optimizer update
    mini_batches_per_epoch: int
    micro_batch_size: int  # samples per forward/backward
    grad_accumulation_steps: int  # micro-batches per optimizer update
    epochs: int
    updates_per_step: int  # optimizer updates per trainer step
    total_steps: int
    data_parallel_ranks: int = 1  # workers that share each mini-batch

    def describe(self) -> str:
        return "\n".join(
            [
                f"  samples per step          {self.samples_per_step} "
                f"({self.prompts_per_step} prompts x {self.samples_per_prompt} samples)",
                f"  mini-batch                {self.mini_batch_size} samples "
                f"({self.mini_batches_per_epoch} per epoch x {self.epochs} epochs)",
                f"  data-parallel ranks       {self.data_parallel_ranks} "
                f"({self.mini_batch_size // self.data_parallel_ranks} samples of each mini-batch per rank)",
                f"  micro-batch               {self.micro_batch_size} samples",
                f"  gradient accumulation     {self.grad_accumulation_steps} micro-batches per update per rank",
                f"  optimizer updates         {self.updates_per_step} per step, "
                f"{self.updates_per_step * self.total_steps} in {self.total_steps} steps",
            ]
        )


def derive_schedule(config: Config) -> Schedule:
    """Derive the schedule; raise ConfigError when the batch sizes do not divide each other."""
    prompts = config.trainer.prompts_per_step
    per_prompt = config.rollout.samples_per_prompt
    samples = prompts * per_prompt
    mini = config.optim.mini_batch_size or samples
    micro = config.optim.micro_batch_size
    if samples % mini:
        divisors = [d for d in range(1, samples + 1) if samples % d == 0 and d % micro == 0]
        fix = f"Use one of {divisors}" if divisors else f"Change optim.micro_batch_size={micro} (it must divide it)"
        raise ConfigError(
            f"optim.mini_batch_size={mini} does not divide the {samples} samples of a step "
            f"(trainer.prompts_per_step={prompts} x rollout.samples_per_prompt={per_prompt}). "
            f"{fix}, or set 0 for one update per step."
        )
    workers = config.trainer.num_workers if config.trainer.backend == "ray" else 1
    if mini % workers:
        raise ConfigError(
            f"trainer.num_workers={workers} must divide the mini-batch of {mini} samples (optim.mini_batch_size): "
            "each rank takes an equal share."
        )
    per_rank = mini // workers
    if per_rank % micro:
        divisors = [d for d in range(1, per_rank + 1) if per_rank % d == 0]
        where = f"optim.mini_batch_size={mini}" if workers == 1 else f"the {per_rank} samples per rank of a mini-batch"
        raise ConfigError(f"optim.micro_batch_size={micro} does not divide {where}. Use one of {divisors}.")
    return Schedule(
        prompts_per_step=prompts,
        samples_per_prompt=per_prompt,
        samples_per_step=samples,
        mini_batch_size=mini,
        mini_batches_per_epoch=samples // mini,
        micro_batch_size=micro,
        grad_accumulation_steps=per_rank // micro,
        epochs=config.optim.epochs,
        updates_per_step=(samples // mini) * config.optim.epochs,
        total_steps=config.trainer.steps,
        data_parallel_ranks=workers,
    )


def check_sft_schedule(config: Config) -> None:
    """`ascent sft` takes `sft.batch_size` examples per step, split like an RL step's samples."""
    batch, optim = config.sft.batch_size, config.optim
    mini = optim.mini_batch_size or batch
    workers = config.trainer.num_workers if config.trainer.backend == "ray" else 1
    if batch % mini or mini % workers or (mini // workers) % optim.micro_batch_size:
        per_rank = f" over trainer.num_workers={workers} ranks" if workers > 1 else ""
        raise ConfigError(
            f"sft.batch_size={batch} must be divisible by optim.mini_batch_size={optim.mini_batch_size} "
            f"(0 = the whole batch), whose share{per_rank} must be divisible by "
            f"optim.micro_batch_size={optim.micro_batch_size}."
        )
