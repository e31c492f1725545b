"""The native rollout engine: a lean decode loop over the policy's own Hugging Face modules.

What it does that `generate` does not:
- each prompt is prefilled once, and its KV cache is copied to its `samples_per_prompt` rows (GRPO's samples
  of one prompt share it);
- a sequence that stopped leaves the batch at once, so the rest decode with a smaller batch;
- sampling is the same seeded Gumbel-max draw as the `hf` engine (`ascent.rollout.sampling`), so both
  engines give identical samples for the same seeds and weights, and the logprobs come from the same
  temperature-scaled distribution the loss assumes.

It drives the model's forward with a dynamic KV cache; supported architectures are the Llama family
(Llama, Qwen2, Qwen3, Mistral), whose forward takes explicit position ids with left-padded prompts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from transformers import DynamicCache, PreTrainedModel

from ascent.models.logprobs import position_ids_from_mask
from ascent.rollout.hf import eos_token_ids, load_weights, to_trajectories
from ascent.rollout.sampling import gumbel_sample, row_seeds
from ascent.rollout.trajectories import SamplingParams, Trajectories, left_pad

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral")


class NativeRolloutEngine:
    """Generates with the module it was given (colocated: it shares the policy's tensors)."""

    def __init__(self, model: PreTrainedModel, tokenizer) -> None:
        model_type = getattr(model.config, "model_type", None)
        if model_type not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"rollout.engine=native supports {', '.join(SUPPORTED_ARCHITECTURES)} models, not {model_type!r}; "
                "use rollout.engine=hf."
            )
        self.model = model
        self.pad_token_id = tokenizer.pad_token_id
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.prefilled_prompts = 0  # prompts prefilled since the engine was built (each once per call)
        self.last_timings: dict[str, float] = {}

    @torch.no_grad()
    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingParams, prompt_seeds: list[int] | None = None
    ) -> Trajectories:
        """Sample `samples_per_prompt` responses per prompt; prompt i's sample j depends only on prompt_seeds[i]
        (default: sampling.seed + i), j and the weights."""
        device = next(self.model.parameters()).device
        seeds = prompt_seeds if prompt_seeds is not None else [sampling.seed + i for i in range(len(prompt_token_ids))]
        was_training = self.model.training
        self.model.eval()
        try:
            trajectories = self._generate(prompt_token_ids, sampling, seeds, device)
        finally:
            self.model.train(was_training)
        return trajectories

    def _generate(self, prompt_token_ids, sampling: SamplingParams, seeds: list[int], device) -> Trajectories:
        samples = sampling.samples_per_prompt
        greedy = sampling.temperature == 0
        temperature = 1.0 if greedy else sampling.temperature
        start = time.perf_counter()

        prompt_ids, prompt_mask = left_pad(prompt_token_ids, self.pad_token_id)
        positions = position_ids_from_mask(prompt_mask)
        cache = DynamicCache()
        logits = self._forward(prompt_ids, prompt_mask, positions, cache, device)
        self.prefilled_prompts += len(prompt_token_ids)
        cache.batch_repeat_interleave(samples)
        logits = logits.repeat_interleave(samples, dim=0)
        attention = prompt_mask.repeat_interleave(samples, dim=0).to(device)
        next_position = positions[:, -1:].repeat_interleave(samples, dim=0).to(device) + 1
        prefill_done = time.perf_counter()

        rows = len(prompt_token_ids) * samples
        row_seed = row_seeds(seeds, samples).to(device)
        generated = torch.full((rows, sampling.max_tokens), self.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros((rows, sampling.max_tokens), dtype=torch.float32)
        active = torch.arange(rows, device=device)  # the rows still decoding, in cache order
        eos = torch.tensor(self.eos_token_ids, device=device)
        for step in range(sampling.max_tokens):
            scaled = logits / temperature
            if greedy:
                tokens = logits.argmax(-1)
            else:
                tokens = gumbel_sample(scaled, row_seed[active], step, sampling.top_k, sampling.top_p)
            picked = torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
            generated[active.cpu(), step] = tokens.cpu()
            logprobs[active.cpu(), step] = picked.cpu()
            running = ~torch.isin(tokens, eos)
            if step == sampling.max_tokens - 1 or not running.any():
                break
            if not running.all():  # stopped rows leave the batch and its cache
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                active, tokens, attention = active[keep], tokens[keep], attention[keep]
                next_position = next_position[keep]
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            logits = self._forward(tokens[:, None], attention, next_position, cache, device)
            next_position = next_position + 1

        self.last_timings = {"prefill_s": prefill_done - start, "decode_s": time.perf_counter() - prefill_done}
        repeated_ids = prompt_ids.repeat_interleave(samples, dim=0)
        repeated_mask = prompt_mask.repeat_interleave(samples, dim=0)
        return to_trajectories(
            repeated_ids, repeated_mask, generated, logprobs, samples, self.eos_token_ids, self.pad_token_id
        )

    def _forward(self, input_ids, attention_mask, position_ids, cache: DynamicCache, device) -> torch.Tensor:
        """Logits [B, V] (float32) of the last position, extending `cache`."""
        output = self.model(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            position_ids=position_ids.to(device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return output.logits[:, -1].float()

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        load_weights(self.model, named_tensors)

    def sleep(self) -> None:
        """Nothing to free: the KV cache lives for one `generate` call."""

    def wake(self) -> None:
        """Nothing to restore."""
