"""The reference rollout engine: Hugging Face `generate` on the policy's own module.

It is the correctness baseline for faster engines: seeded Gumbel-max sampling (exact samples of the
temperature-scaled, top-k/top-p filtered distribution) and per-token logprobs taken from the same
temperature-scaled distribution the loss assumes.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    StoppingCriteria,
    StoppingCriteriaList,
)

from ascent.rollout.sampling import SeededGumbelSampler, row_seeds
from ascent.rollout.stopping import StopStrings, StopStringsCache, response_ends
from ascent.rollout.trajectories import SamplingParams, Trajectories, left_pad, right_pad


class HFRolloutEngine:
    """Generates with the model it was given. Colocated with training, it shares the policy's tensors,
    so a weight update after an optimizer step has nothing to copy."""

    def __init__(self, model: PreTrainedModel, tokenizer) -> None:
        self.model = model
        self.pad_token_id = tokenizer.pad_token_id
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.stop_strings = StopStringsCache(tokenizer)
        self.last_timings: dict[str, float] = {}  # `generate` does not report its prefill and decode apart

    @torch.no_grad()
    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingParams, prompt_seeds: list[int] | None = None
    ) -> Trajectories:
        """Sample with per-row seeds (see `ascent.rollout.sampling`): prompt i's sample j depends only on
        prompt_seeds[i] (default: sampling.seed + i), j and the weights, not on the rest of the batch."""
        device = next(self.model.parameters()).device
        repeated = [ids for ids in prompt_token_ids for _ in range(sampling.samples_per_prompt)]
        prompt_ids, prompt_mask = left_pad(repeated, self.pad_token_id)
        greedy = sampling.temperature == 0
        processors = [_SampledLogprobs(temperature=1.0 if greedy else sampling.temperature)]
        if not greedy:
            seeds = (
                prompt_seeds if prompt_seeds is not None else [sampling.seed + i for i in range(len(prompt_token_ids))]
            )
            rows = row_seeds(seeds, sampling.samples_per_prompt)
            processors.append(
                SeededGumbelSampler(
                    rows, prompt_ids.shape[1], sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p
                )
            )
        stop_strings = self.stop_strings.get(sampling.stop)
        criteria = [_StopStringCriteria(stop_strings, prompt_ids.shape[1])] if stop_strings else []
        generation_config = GenerationConfig(
            do_sample=False,  # the seeded sampler above turns greedy decoding into sampling
            max_new_tokens=sampling.max_tokens,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
        )
        was_training = self.model.training
        self.model.eval()
        try:
            sequences = self.model.generate(
                input_ids=prompt_ids.to(device),
                attention_mask=prompt_mask.to(device),
                generation_config=generation_config,
                logits_processor=LogitsProcessorList(processors),
                stopping_criteria=StoppingCriteriaList(criteria),
            )
        finally:
            self.model.train(was_training)
        generated = sequences[:, prompt_ids.shape[1] :].cpu()
        logprobs = processors[0].logprobs_of(generated)
        ends = response_ends(generated, self.eos_token_ids, stop_strings)
        return to_trajectories(
            prompt_ids, prompt_mask, generated, logprobs, sampling.samples_per_prompt, ends, self.pad_token_id
        )

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        load_weights(self.model, named_tensors)

    def sleep(self) -> None:
        """Nothing to free: HF generate allocates its KV cache per call."""

    def wake(self) -> None:
        """Nothing to restore."""


class _StopStringCriteria(StoppingCriteria):
    """Ends a row of `generate` at the token that completes a stop string."""

    def __init__(self, stop_strings: StopStrings, prompt_length: int) -> None:
        self.stop_strings = stop_strings
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        rows = input_ids[:, self.prompt_length :].tolist()
        return torch.tensor([self.stop_strings.completed(row) for row in rows], device=input_ids.device)


class _SampledLogprobs(LogitsProcessor):
    """Records log softmax(logits / T) of each sampled token while `generate` runs.

    Placed first in the processor list (our GenerationConfig adds none of its own), it sees the raw
    logits, before the seeded sampler perturbs them. Step t's distribution is kept until
    step t+1 reveals the sampled token in `input_ids`, so memory stays at one [B, V] row block.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.previous: torch.Tensor | None = None
        self.picked: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.previous is not None:
            self.picked.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1).cpu())
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def logprobs_of(self, generated: torch.Tensor) -> torch.Tensor:
        """[B, G] logprobs of the generated tokens (`generate` may run extra steps it then undoes)."""
        num_generated = generated.shape[1]
        picked = self.picked[:num_generated]
        if len(picked) < num_generated and self.previous is not None:
            last = generated[:, num_generated - 1 : num_generated].to(self.previous.device)
            picked.append(self.previous.gather(-1, last).squeeze(-1).cpu())
        if not picked:
            return torch.zeros(generated.shape, dtype=torch.float32)
        return torch.stack(picked, dim=1)


def to_trajectories(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    generated: torch.Tensor,
    logprobs: torch.Tensor,
    samples_per_prompt: int,
    ends: list[tuple[int, str]],
    pad_token_id: int,
) -> Trajectories:
    """Rows of generated tokens [B, G] (and their logprobs) cut at their `ends` (length, finish reason; see
    `ascent.rollout.stopping.response_ends`), as a Trajectories batch whose consecutive `samples_per_prompt`
    rows share a group."""
    responses = [row[:length] for row, (length, _) in zip(generated.tolist(), ends, strict=True)]
    finish_reasons = [reason for _, reason in ends]
    response_ids, response_mask = right_pad(responses, pad_token_id)
    width = response_ids.shape[1]
    rollout_logprobs = torch.zeros(response_ids.shape, dtype=torch.float32)
    rollout_logprobs[:, : min(width, logprobs.shape[1])] = logprobs[:, :width]
    rollout_logprobs *= response_mask
    num_prompts = len(prompt_ids) // samples_per_prompt
    return Trajectories(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        loss_mask=response_mask.float(),
        rollout_logprobs=rollout_logprobs,
        group_ids=torch.arange(num_prompts).repeat_interleave(samples_per_prompt),
        finish_reasons=finish_reasons,
    )


def load_weights(model: torch.nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy full tensors into `model`'s parameters of the same names; a tensor that already is the parameter
    (an engine colocated with the policy shares its storage) is skipped."""
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in named_tensors:
            target = parameters[name]
            if target.data_ptr() != tensor.data_ptr():
                target.copy_(tensor)


def eos_token_ids(model: PreTrainedModel, tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(configured)
    return sorted(i for i in ids if i is not None)
