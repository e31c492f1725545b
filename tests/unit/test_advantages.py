"""Advantage estimators against hand-computed values, and their invariants."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascent.algorithms.advantages import (
    compute_advantages,
    discounted_returns,
    gae_advantages,
    gpg_advantages,
    grpo_advantages,
    grpo_passk_advantages,
    opo_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    remax_advantages,
    rloo_advantages,
    token_level_rewards,
    whiten,
)


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


@pytest.mark.parametrize(
    "estimator",
    [
        lambda r, g: grpo_advantages(r, g, True),
        lambda r, g: grpo_advantages(r, g, False),
        rloo_advantages,
        lambda r, g: opo_advantages(r, g, torch.arange(1.0, 6.0)),
        gpg_advantages,
        grpo_passk_advantages,
    ],
    ids=["grpo", "dr_grpo", "rloo", "opo", "gpg", "grpo_passk"],
)
def test_constant_groups_and_singletons_get_zero_advantage(estimator):
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 2])
    assert torch.equal(estimator(rewards, groups), torch.zeros(5))


def test_rloo_subtracts_the_mean_of_the_other_samples():
    # sample 0: 1 - mean(0, 0, 1) = 2/3; sample 1: 0 - mean(1, 0, 1) = -2/3
    advantages = rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(advantages, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))


def test_opo_baseline_is_the_length_weighted_mean():
    # b = (2 * 1 + 6 * 0) / (2 + 6) = 0.25
    advantages = opo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.tensor([2, 6]))
    torch.testing.assert_close(advantages, torch.tensor([0.75, -0.25]))


def test_gpg_rescales_by_batch_over_informative_samples():
    # group 0 informative (1, 0), group 1 constant: alpha = 4 / 2 = 2; A = 2 * (r - 0.5)
    advantages = gpg_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    torch.testing.assert_close(advantages, torch.tensor([1.0, -1.0, 0.0, 0.0]))


def test_grpo_passk_credits_only_the_best_sample_with_its_margin():
    rewards, groups = torch.tensor([0.2, 0.9, 0.5]), torch.zeros(3, dtype=torch.long)
    torch.testing.assert_close(grpo_passk_advantages(rewards, groups, std_normalize=False), torch.tensor([0, 0.4, 0]))
    std = float(rewards.std())
    normalised = grpo_passk_advantages(rewards, groups, std_normalize=True, eps=0.0)
    torch.testing.assert_close(normalised, torch.tensor([0, 0.4 / std, 0]))
    tied = grpo_passk_advantages(torch.tensor([1.0, 1.0, 0.0]), groups)  # two best: margin 0
    assert torch.equal(tied, torch.zeros(3))


def test_whiten_uses_only_masked_entries():
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    # mean 2, unbiased variance 1
    torch.testing.assert_close(whiten(values, mask, eps=0.0), torch.tensor([[-1.0, 0.0, 1.0, 0.0]]))


def test_discounted_returns_pass_through_untrained_tokens():
    # mask 0 at t=1 (tool output): G3 = 1, G2 = 0.5, G1 carries 0.5 (masked out), G0 = 0.5 * 0.5
    returns = discounted_returns(torch.tensor([[0.0, 0.0, 0.0, 1.0]]), torch.tensor([[1.0, 0.0, 1.0, 1.0]]), 0.5)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.0, 0.5, 1.0]]))


def test_gae_matches_the_recursion_by_hand():
    rewards, values = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.2, 0.4]])
    mask = torch.ones(1, 3)
    output = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8)
    # delta2 = 1 - 0.4 = 0.6;         A2 = 0.6
    # delta1 = 0.9 * 0.4 - 0.2 = 0.16; A1 = 0.16 + 0.72 * 0.6 = 0.592
    # delta0 = 0.9 * 0.2 - 0.5 = -0.32; A0 = -0.32 + 0.72 * 0.592 = 0.10624
    raw = torch.tensor([[0.10624, 0.592, 0.6]])
    torch.testing.assert_close(output.returns, raw + values)
    torch.testing.assert_close(output.advantages, whiten(raw, mask))


def test_gae_with_gamma_and_lambda_one_returns_the_final_reward_everywhere():
    output = gae_advantages(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.2, 0.4]]), torch.ones(1, 3))
    torch.testing.assert_close(output.returns, torch.ones(1, 3))


def test_gae_carries_value_and_advantage_across_untrained_tokens():
    # t=1 is tool output (mask 0, value 9 must be ignored): A0 = (0.9 * 0.4 - 0.5) + 0.72 * 0.6 = 0.292
    rewards, values = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 9.0, 0.4]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    output = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(output.returns, torch.tensor([[0.792, 0.0, 1.0]]))
    torch.testing.assert_close(output.advantages, whiten(torch.tensor([[0.292, 0.0, 0.6]]), mask))


def test_reinforce_pp_whitens_discounted_returns_over_the_batch():
    # returns [[1, 1], [0, 0]]: mean 0.5, unbiased std sqrt(1/3)
    advantages = reinforce_pp_advantages(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.ones(2, 2))
    a = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(advantages, torch.tensor([[a, a], [-a, -a]]), atol=1e-5, rtol=1e-5)


def test_reinforce_pp_baseline_centres_by_group_then_whitens():
    # centred [0.5, -0.5] over tokens [0.5, 0.5, -0.5]: mean 1/6, unbiased std sqrt(1/3)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    advantages = reinforce_pp_baseline_advantages(torch.tensor([1.0, 0.0]), mask, torch.tensor([0, 0]))
    s = math.sqrt(1 / 3)
    expected = torch.tensor([[(1 / 3) / s, (1 / 3) / s], [(-2 / 3) / s, 0.0]])
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=1e-5)


def test_remax_subtracts_the_greedy_reward():
    token_rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    advantages = remax_advantages(token_rewards, mask, torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.5], [-0.5, 0.0]]))


def test_token_level_rewards_sit_on_the_last_trained_token_minus_kl():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(
        token_level_rewards(torch.tensor([2.0, 3.0]), mask), torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    )
    with_kl = token_level_rewards(torch.tensor([2.0, 3.0]), mask, kl=torch.ones(2, 3), kl_coef=0.1)
    torch.testing.assert_close(with_kl, torch.tensor([[-0.1, 1.9, 0.0], [0.0, 0.0, 0.0]]))


def test_sequence_advantage_is_broadcast_over_trained_tokens_only():
    loss_mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    token_rewards = token_level_rewards(torch.tensor([1.0, 0.0]), loss_mask)
    advantages = compute_advantages("grpo", torch.tensor([1.0, 0.0]), token_rewards, loss_mask, torch.tensor([0, 0]))
    advantages = advantages.advantages
    a = 0.5 / math.sqrt(0.5) / (1 + 1e-6 / math.sqrt(0.5))  # (r - mean) / (std + eps), std = sqrt(0.5)
    torch.testing.assert_close(advantages, torch.tensor([[a, a, 0.0], [-a, 0.0, 0.0]]))


def test_compute_advantages_names_what_gae_and_remax_need():
    mask = torch.ones(2, 2)
    with pytest.raises(ValueError, match="critic"):
        compute_advantages("gae", torch.zeros(2), torch.zeros(2, 2), mask, torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="greedy"):
        compute_advantages("remax", torch.zeros(2), torch.zeros(2, 2), mask, torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="available: grpo"):
        compute_advantages("grop", torch.zeros(2), torch.zeros(2, 2), mask, torch.tensor([0, 0]))


group_rewards = st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=2, max_size=6)


@settings(max_examples=60, deadline=None)
@given(first=group_rewards, second=group_rewards, shift=st.floats(-100, 100, width=32))
def test_group_advantages_ignore_a_constant_added_to_one_group(first, second, shift):
    rewards = torch.tensor(first + second)
    groups = torch.tensor([0] * len(first) + [1] * len(second))
    shifted = rewards + torch.tensor([shift] * len(first) + [0.0] * len(second))
    lengths = torch.arange(1.0, len(rewards) + 1)
    for estimator in (
        lambda r: grpo_advantages(r, groups, std_normalize=False),
        lambda r: rloo_advantages(r, groups),
        lambda r: opo_advantages(r, groups, lengths),
    ):
        torch.testing.assert_close(estimator(shifted), estimator(rewards), atol=1e-3, rtol=1e-3)


@settings(max_examples=60, deadline=None)
@given(rewards=st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=2, max_size=8))
def test_group_centred_advantages_sum_to_zero(rewards):
    tensor, groups = torch.tensor(rewards), torch.zeros(len(rewards), dtype=torch.long)
    for advantages in (grpo_advantages(tensor, groups, std_normalize=False), rloo_advantages(tensor, groups)):
        assert abs(float(advantages.sum())) < 1e-3


def test_equal_rewards_give_exactly_zero_despite_float_rounding():
    # 0.7 summed 16 times is not 16 * 0.7 in float32: a naive (r - mean) / (std + eps) gives |A| ~ 0.1
    rewards = torch.full((16,), 0.7)
    groups = torch.zeros(16, dtype=torch.long)
    assert torch.equal(grpo_advantages(rewards, groups), torch.zeros(16))
    mixed = torch.cat([torch.tensor([1.0, 0.0]), torch.full((8,), 0.7)])
    gpg = gpg_advantages(mixed, torch.tensor([0, 0] + [1] * 8))
    torch.testing.assert_close(gpg, torch.tensor([2.5, -2.5] + [0.0] * 8))  # alpha = 10 / 2


def test_a_sample_masked_out_of_the_loss_keeps_its_reward_in_the_group_baseline():
    rewards = torch.tensor([1.0, 1.0, -1.0, -1.0])
    mask = torch.ones(4, 3)
    mask[3] = 0  # truncated and masked: no token carries its reward
    token_rewards = token_level_rewards(rewards, mask)
    advantages = compute_advantages("grpo", rewards, token_rewards, mask, torch.zeros(4, dtype=torch.long))
    a = 1 / math.sqrt(4 / 3) / (1 + 1e-6 / math.sqrt(4 / 3))  # mean 0, unbiased std sqrt(4/3)
    torch.testing.assert_close(advantages.advantages[:, 0], torch.tensor([a, a, -a, 0.0]))
