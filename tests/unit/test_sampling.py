"""Seeded Gumbel-max sampling: exact distribution, filters, and independence from the batch."""

import pytest
import torch

from ascent.rollout.sampling import SeededGumbelSampler, filter_logits, row_seeds, uniform_noise


def sample(logits: torch.Tensor, seeds: torch.Tensor, temperature=1.0, top_k=0, top_p=1.0) -> torch.Tensor:
    sampler = SeededGumbelSampler(seeds, prompt_length=0, temperature=temperature, top_k=top_k, top_p=top_p)
    return sampler(torch.zeros(len(seeds), 0, dtype=torch.long), logits).argmax(-1)


def test_sample_frequencies_match_the_tempered_softmax():
    logits = torch.tensor([1.0, 2.0, 0.5, -1.0])
    rows = 100_000
    for temperature in (1.0, 0.5):
        picks = sample(logits.expand(rows, 4), torch.arange(rows), temperature=temperature)
        frequencies = torch.bincount(picks, minlength=4) / rows
        torch.testing.assert_close(frequencies, torch.softmax(logits / temperature, -1), atol=6e-3, rtol=0)


def test_filters_keep_the_top_k_and_the_top_p_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[False, False, True, True]]
    # mass above each token: 0, 0.5, 0.8, 0.95 -> top_p 0.8 keeps the first two (the third starts at 0.8)
    assert torch.isinf(filter_logits(logits, top_p=0.8)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.81)).tolist() == [[False, False, False, True]]
    picks = sample(logits.expand(20_000, 4), torch.arange(20_000), top_p=0.8)
    assert set(picks.tolist()) == {0, 1}


def test_min_p_drops_tokens_below_a_fraction_of_the_most_likely():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    # threshold 0.4 * 0.5 = 0.2: only 0.5 and 0.3 stay; at 0.2 the threshold is 0.1 and 0.15 stays too
    assert torch.isinf(filter_logits(logits, min_p=0.4)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, min_p=0.2)).tolist() == [[False, False, False, True]]
    # applied to the temperature-scaled distribution: at T=0.5 probabilities become p^2 / sum, so 0.15 falls out
    assert torch.isinf(filter_logits(logits / 0.5, min_p=0.2)).tolist() == [[False, False, True, True]]


def test_noise_is_a_pure_function_of_seed_step_and_vocabulary_index():
    seeds = row_seeds([7, 8], samples_per_prompt=3)
    assert len(set(seeds.tolist())) == 6  # every sample of every prompt has its own stream
    first = uniform_noise(seeds, step=4, vocab_size=50)
    torch.testing.assert_close(uniform_noise(seeds, step=4, vocab_size=50), first, rtol=0, atol=0)
    torch.testing.assert_close(uniform_noise(seeds[3:], step=4, vocab_size=50), first[3:], rtol=0, atol=0)
    assert not torch.equal(uniform_noise(seeds, step=5, vocab_size=50), first)
    assert float(first.min()) > 0 and float(first.max()) < 1
    assert float(first.mean()) == pytest.approx(0.5, abs=0.05)
