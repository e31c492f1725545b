"""The native rollout engine: a lean decode loop in the policy's process, over the policy's own weights.

What it does that `generate` does not:
- a compact forward (`ascent.rollout.decoder`) with a key/value cache preallocated for the whole call and
  written in place, instead of the model's forward with a cache that grows by concatenation;
- each prompt is prefilled once, and its keys and values are copied to its `samples_per_prompt` rows (GRPO's
  samples of one prompt share them);
- stopped sequences leave the batch: once enough rows have stopped, the cache is compacted to the rows still
  decoding, so a long tail does not make the whole batch pay for it;
- sampling is the same seeded Gumbel-max draw as the `hf` engine (`ascent.rollout.sampling`), so both engines
  give identical samples for the same seeds and weights, and the logprobs come from the same
  temperature-scaled distribution the loss assumes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from ascent.rollout.decoder import LlamaDecoder
from ascent.rollout.hf import eos_token_ids, load_weights, to_trajectories
from ascent.rollout.sampling import gumbel_sample, row_seeds
from ascent.rollout.stopping import StopStrings, StopStringsCache, response_ends
from ascent.rollout.trajectories import SamplingParams, Trajectories, left_pad

# Stopped rows stay in the cache (their tokens are discarded) until they are this fraction of it: compacting
# copies the whole cache, so it is done in a few large steps rather than at every stop.
_COMPACT_FRACTION = 1 / 8


class NativeRolloutEngine:
    """Generates with the module it was given (colocated: it reads the policy's tensors, nothing is copied)."""

    def __init__(self, model: PreTrainedModel, tokenizer) -> None:
        self.decoder = LlamaDecoder(model)
        self.model = model
        self.pad_token_id = tokenizer.pad_token_id
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.stop_strings = StopStringsCache(tokenizer)
        self.prefilled_prompts = 0  # prompts prefilled since the engine was built (each once per call)
        self.last_timings: dict[str, float] = {}

    @torch.no_grad()
    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingParams, prompt_seeds: list[int] | None = None
    ) -> Trajectories:
        """Sample `samples_per_prompt` responses per prompt; prompt i's sample j depends only on prompt_seeds[i]
        (default: sampling.seed + i), j and the weights."""
        seeds = prompt_seeds if prompt_seeds is not None else [sampling.seed + i for i in range(len(prompt_token_ids))]
        start = time.perf_counter()
        device, _ = self.decoder.parameters_device_dtype()
        prompt_ids, prompt_mask = left_pad(prompt_token_ids, self.pad_token_id)
        samples, width = sampling.samples_per_prompt, prompt_ids.shape[1]
        rotary = self.decoder.rotary_tables(width + sampling.max_tokens)

        logits, keys, values = self.decoder.prefill(prompt_ids.to(device), prompt_mask.to(device), rotary)
        self.prefilled_prompts += len(prompt_token_ids)
        cache = self.decoder.new_cache(len(prompt_token_ids) * samples, width + sampling.max_tokens)
        for cached, prefilled in zip(cache.keys + cache.values, keys + values, strict=True):
            by_prompt = cached.view(len(prompt_token_ids), samples, *cached.shape[1:])
            by_prompt[:, :, :, :width] = prefilled[:, None]
        cache.key_mask[:, :width] = prompt_mask.bool().repeat_interleave(samples, dim=0)
        cache.length = width
        logits = logits.repeat_interleave(samples, dim=0)
        positions = prompt_mask.sum(-1).repeat_interleave(samples).to(device)  # next rotary position per row
        prefill_done = time.perf_counter()

        stop_strings = self.stop_strings.get(sampling.stop)
        row_seed = row_seeds(seeds, samples).to(device)
        generated, logprobs = self._decode(logits, positions, cache, rotary, sampling, row_seed, stop_strings)
        generated, logprobs = generated.cpu(), logprobs.cpu()
        self.last_timings = {"prefill_s": prefill_done - start, "decode_s": time.perf_counter() - prefill_done}
        ends = response_ends(generated, self.eos_token_ids, stop_strings)
        repeated_ids = prompt_ids.repeat_interleave(samples, dim=0)
        repeated_mask = prompt_mask.repeat_interleave(samples, dim=0)
        return to_trajectories(repeated_ids, repeated_mask, generated, logprobs, samples, ends, self.pad_token_id)

    def _decode(
        self, logits, positions, cache, rotary, sampling: SamplingParams, row_seed, stop_strings: StopStrings | None
    ):
        """Tokens [B, max_tokens] and their logprobs. Past a row's stop its entries are arbitrary:
        `response_ends` finds where each row stopped."""
        rows, device = logits.shape[0], logits.device
        greedy = sampling.temperature == 0
        temperature = 1.0 if greedy else sampling.temperature
        generated = torch.full((rows, sampling.max_tokens), self.pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((rows, sampling.max_tokens), dtype=torch.float32, device=device)
        eos = torch.tensor(self.eos_token_ids, device=device)
        active = torch.arange(rows, device=device)  # the output row of each cache row
        running = torch.ones(rows, dtype=torch.bool, device=device)  # per cache row: not stopped yet
        for step in range(sampling.max_tokens):
            scaled = logits / temperature
            if greedy:
                tokens = logits.argmax(-1)
            else:
                tokens = gumbel_sample(scaled, row_seed[active], step, sampling.top_k, sampling.top_p, sampling.min_p)
            generated[active, step] = tokens
            logprobs[active, step] = torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
            running &= ~torch.isin(tokens, eos)
            if stop_strings is not None:
                self._stop_at_strings(stop_strings, generated, active, running, tokens, step)
            still_running = int(running.sum())
            if step == sampling.max_tokens - 1 or still_running == 0:
                break
            if len(running) - still_running >= max(1, int(len(running) * _COMPACT_FRACTION)):
                keep = running.nonzero().squeeze(-1)
                cache.keep_rows(keep)
                active, tokens, positions, running = active[keep], tokens[keep], positions[keep], running[keep]
            logits = self.decoder.decode(tokens, positions, cache, rotary)
            positions = positions + 1
        return generated, logprobs

    @staticmethod
    def _stop_at_strings(stop_strings: StopStrings, generated, active, running, tokens, step: int) -> None:
        """Clear `running` for the cache rows whose newest token completed a stop string."""
        candidates = running & stop_strings.could_complete(tokens).to(running.device)
        for cache_row in candidates.nonzero().flatten().tolist():
            if stop_strings.completed(generated[active[cache_row], : step + 1].tolist()):
                running[cache_row] = False

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        load_weights(self.model, named_tensors)

    def sleep(self) -> None:
        """Nothing to free: the key/value cache lives for one `generate` call."""

    def wake(self) -> None:
        """Nothing to restore."""
