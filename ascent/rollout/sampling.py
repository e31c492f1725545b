"""Sampling that depends on (seed, sample, step) only, never on the batch a sample runs in.

A token is drawn by the Gumbel-max trick: argmax(logits / T + G) with G = -log(-log(U)) is an exact
sample from softmax(logits / T) (after top-k / top-p filtering). U comes from a counter-based hash of
(row seed, decoding step, vocabulary index), so the same prompt with the same seed gives the same
response whether it is generated alone, in a batch of 512, or on another data-parallel rank.
"""

from __future__ import annotations

import math

import torch
from transformers import LogitsProcessor

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit unsigned constant as the int64 torch stores."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic on signed integers)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (wrapping arithmetic): a bijective, well-mixed hash."""
    x = x + _GOLDEN
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


def row_seeds(prompt_seeds: list[int], samples_per_prompt: int) -> torch.Tensor:
    """One seed per generated row: sample j of prompt i gets mix(prompt_seed_i, j). [B] int64."""
    prompts = torch.tensor([_signed(seed) for seed in prompt_seeds], dtype=torch.int64)
    samples = torch.arange(samples_per_prompt, dtype=torch.int64)
    return mix64(mix64(prompts).repeat_interleave(samples_per_prompt) ^ samples.repeat(len(prompt_seeds)))


def uniform_noise(seeds: torch.Tensor, step: int, vocab_size: int) -> torch.Tensor:
    """U(0, 1) per (row, vocabulary entry) at decoding `step`: [B, V] float32, a pure function of its inputs.
    24 random bits per draw: float32 represents each value exactly, and 2^-25 is far below any top-p."""
    keys = mix64(seeds ^ mix64(torch.tensor(step, dtype=torch.int64, device=seeds.device)))
    counters = keys.unsqueeze(-1) + torch.arange(vocab_size, dtype=torch.int64, device=seeds.device)
    bits = _shift_right(mix64(counters), 40)
    return (bits.float() + 0.5) / float(1 << 24)


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """Set to -inf every logit whose probability is below min_p times the most likely token's (0 = off), outside
    the top_k largest (0 = off), or outside the smallest set whose probability reaches top_p (1 = off).
    logits [B, V] float, already temperature-scaled."""
    if min_p > 0:
        # p_i < min_p * p_max  <=>  logit_i < logit_max + log(min_p)
        floor = logits.max(dim=-1, keepdim=True).values + math.log(min_p)
        logits = logits.masked_fill(logits < floor, float("-inf"))
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probabilities = torch.softmax(ordered, dim=-1)
        before = probabilities.cumsum(-1) - probabilities  # mass of the tokens ranked above each one
        sorted_drop = before >= top_p
        drop = torch.zeros_like(sorted_drop).scatter(-1, order, sorted_drop)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class SeededGumbelSampler(LogitsProcessor):
    """Turns greedy decoding into seeded sampling: returns filtered logits / T plus Gumbel noise, so the
    argmax that greedy `generate` takes is a sample. `seeds` [B] int64 are the rows' seeds."""

    def __init__(
        self, seeds: torch.Tensor, prompt_length: int, temperature: float, top_k: int, top_p: float, min_p: float = 0.0
    ):
        self.seeds = seeds
        self.prompt_length = prompt_length
        self.temperature, self.top_k, self.top_p, self.min_p = temperature, top_k, top_p, min_p

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_length
        seeds = self.seeds.to(scores.device)
        return gumbel_perturbed(scores.float() / self.temperature, seeds, step, self.top_k, self.top_p, self.min_p)


def gumbel_perturbed(
    scaled_logits: torch.Tensor, seeds: torch.Tensor, step: int, top_k: int, top_p: float, min_p: float = 0.0
) -> torch.Tensor:
    """Filtered temperature-scaled logits [B, V] plus each row's Gumbel noise at decoding `step`: their
    argmax is the row's sample."""
    logits = filter_logits(scaled_logits, top_k, top_p, min_p)
    uniform = uniform_noise(seeds, step, scaled_logits.shape[-1])
    return logits - torch.log(-torch.log(uniform))


def gumbel_sample(
    scaled_logits: torch.Tensor, seeds: torch.Tensor, step: int, top_k: int, top_p: float, min_p: float = 0.0
) -> torch.Tensor:
    """The sampled token of each row [B] (see `gumbel_perturbed`)."""
    return gumbel_perturbed(scaled_logits, seeds, step, top_k, top_p, min_p).argmax(-1)
