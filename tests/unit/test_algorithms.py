"""Advantage, policy-loss and KL formulas against hand-computed values."""

import math

import pytest
import torch

from ascent.algorithms.advantages import compute_advantages, grpo_advantages, token_level_rewards
from ascent.algorithms.kl import kl_penalty
from ascent.algorithms.losses import aggregate, nll_loss, ppo_clip_loss
from ascent.workers.optim import lr_multiplier


def test_grpo_advantages_match_hand_computation():
    # group 0: rewards 1, 0, 0, 1 -> mean 0.5, unbiased std sqrt(1/3); group 1: 2, 4 -> mean 3, std sqrt(2)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0])
    groups = torch.tensor([0, 0, 0, 0, 7, 7])
    advantages = grpo_advantages(rewards, groups, eps=0.0)
    s0, s1 = math.sqrt(1 / 3), math.sqrt(2)
    expected = torch.tensor([0.5 / s0, -0.5 / s0, -0.5 / s0, 0.5 / s0, -1 / s1, 1 / s1])
    torch.testing.assert_close(advantages, expected)


def test_dr_grpo_only_centres():
    advantages = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long), False)
    torch.testing.assert_close(advantages, torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_constant_groups_and_singletons_get_zero_advantage():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 2])
    for std_normalize in (True, False):
        assert torch.equal(grpo_advantages(rewards, groups, std_normalize), torch.zeros(5))


def test_sequence_advantage_is_broadcast_over_trained_tokens_only():
    loss_mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    token_rewards = token_level_rewards(torch.tensor([1.0, 0.0]), loss_mask)
    advantages = compute_advantages("grpo", token_rewards, loss_mask, torch.tensor([0, 0])).advantages
    a = 0.5 / math.sqrt(0.5) / (1 + 1e-6 / math.sqrt(0.5))  # (r - mean) / (std + eps), std = sqrt(0.5)
    torch.testing.assert_close(advantages, torch.tensor([[a, a, 0.0], [-a, 0.0, 0.0]]))


def test_ppo_clip_loss_matches_hand_computation():
    # Four tokens: ratios e^{0}, e^{0.5}, e^{-0.5}, e^{0.1}; advantages +1, +1, -1, -2; clip 0.2 / 0.28
    old = torch.zeros(1, 4)
    logprobs = torch.tensor([[0.0, 0.5, -0.5, 0.1]], requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0, -1.0, -2.0]])
    mask = torch.ones(1, 4)
    out = ppo_clip_loss(logprobs, old, advantages, mask, normaliser=4.0, clip_low=0.2, clip_high=0.28)
    r = [1.0, math.exp(0.5), math.exp(-0.5), math.exp(0.1)]
    # token 1: min(r*A, 1.28*A) = 1.28 (clipped high); token 2: A<0, min(-r, -0.8) = -0.8 (clipped low)
    # token 3: A=-2, r=1.105 inside the range: -2r
    per_token = [-1.0, -1.28, 0.8, 2 * r[3]]
    assert out.loss.item() == pytest.approx(sum(per_token) / 4, abs=1e-6)
    assert out.metrics["clip_frac_high"].item() == pytest.approx(0.25)
    assert out.metrics["clip_frac_low"].item() == pytest.approx(0.25)
    expected_kl = sum(x - 1 - math.log(x) for x in r) / 4
    assert out.metrics["approx_kl"].item() == pytest.approx(expected_kl, abs=1e-6)
    out.loss.backward()
    # d/dlogp of -r*A is -r*A for unclipped tokens, 0 for clipped ones; divided by the normaliser
    expected_grad = torch.tensor([[-1.0 / 4, 0.0, 0.0, 2 * r[3] / 4]])
    torch.testing.assert_close(logprobs.grad, expected_grad)


def test_loss_ignores_masked_tokens_and_uses_the_given_normaliser():
    logprobs = torch.tensor([[0.3, 9.0]])
    out = ppo_clip_loss(logprobs, torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([[1.0, 0.0]]), normaliser=10.0)
    assert out.loss.item() == pytest.approx(-min(math.exp(0.3), 1.2) / 10)


def test_token_mean_shares_of_micro_batches_sum_to_the_full_batch_mean():
    values = torch.arange(12.0).reshape(3, 4)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    full = aggregate(values, mask, float(mask.sum()), "token-mean")
    parts = sum(aggregate(values[i : i + 1], mask[i : i + 1], float(mask.sum()), "token-mean") for i in range(3))
    assert full.item() == pytest.approx((0 + 1 + 4 + 5 + 6 + 7 + 8) / 7)
    assert parts.item() == pytest.approx(full.item())


def test_kl_estimators():
    logprobs, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    log_r = torch.tensor([[0.5, -1.0]])
    torch.testing.assert_close(kl_penalty(logprobs, ref, "k1"), log_r)
    torch.testing.assert_close(kl_penalty(logprobs, ref, "k2"), 0.5 * log_r**2)
    torch.testing.assert_close(kl_penalty(logprobs, ref, "k3"), torch.exp(-log_r) - 1 + log_r)
    assert (kl_penalty(logprobs, ref, "k3") >= 0).all()
    assert torch.equal(kl_penalty(ref, ref, "k3"), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="k1, abs, k2, k3"):
        kl_penalty(logprobs, ref, "k4")


def test_nll_loss_is_mean_negative_logprob_of_targets():
    out = nll_loss(torch.tensor([[-1.0, -3.0, -100.0]]), torch.tensor([[1.0, 1.0, 0.0]]), normaliser=2.0)
    assert out.loss.item() == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("step", "schedule", "expected"),
    [
        (0, "constant", 0.25),
        (3, "constant", 1.0),
        (9, "constant", 1.0),
        (4, "linear", 1.0),
        (14, "linear", 0.55),
        (24, "linear", 0.1),
        (14, "cosine", 0.55),
        (24, "cosine", 0.1),
    ],
)
def test_lr_multiplier(step, schedule, expected):
    # warm-up 4 steps, 24 steps in all, decay to 10 %
    assert lr_multiplier(step, 4, 24, schedule, 0.1) == pytest.approx(expected)
