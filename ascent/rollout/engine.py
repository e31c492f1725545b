"""The RolloutEngine protocol every generation backend implements, and the engine registry."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch

from ascent.rollout.hf import HFRolloutEngine
from ascent.rollout.native import NativeRolloutEngine
from ascent.rollout.trajectories import SamplingParams, Trajectories
from ascent.rollout.vllm_engine import VLLMRolloutEngine  # imports vllm only when an engine is built


class RolloutEngine(Protocol):
    last_timings: dict[str, float]  # seconds per stage of the last `generate` (e.g. prefill_s, decode_s)

    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingParams, prompt_seeds: list[int] | None = None
    ) -> Trajectories:
        """Sample `sampling.samples_per_prompt` responses per prompt; rows of prompt i have group id i.
        The samples of prompt i depend on prompt_seeds[i], never on the other prompts of the batch."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights (full, unsharded tensors)."""
        ...

    def sleep(self) -> None:
        """Free generation memory (KV cache, weights copies) while the trainer uses the device."""
        ...

    def wake(self) -> None: ...


ROLLOUT_ENGINES = {"hf": HFRolloutEngine, "native": NativeRolloutEngine, "vllm": VLLMRolloutEngine}


def build_rollout_engine(name: str, model: torch.nn.Module, tokenizer) -> RolloutEngine:
    return ROLLOUT_ENGINES[name](model, tokenizer)
