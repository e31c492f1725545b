"""Policy and value losses and loss aggregation against hand-computed values and gradients."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascent.algorithms.losses import (
    AGGREGATIONS,
    aggregate,
    cispo_loss,
    clip_cov_loss,
    dro_loss,
    gmpo_loss,
    gpg_loss,
    gspo_loss,
    kl_cov_loss,
    loss_normaliser,
    nll_loss,
    ppo_clip_loss,
    sapo_loss,
    truncated_importance_weights,
    value_loss,
)


def leaf(values) -> torch.Tensor:
    return torch.tensor([values], requires_grad=True)


def test_ppo_clip_loss_matches_hand_computation():
    # Four tokens: ratios e^{0}, e^{0.5}, e^{-0.5}, e^{0.1}; advantages +1, +1, -1, -2; clip 0.2 / 0.28
    old = torch.zeros(1, 4)
    logprobs = leaf([0.0, 0.5, -0.5, 0.1])
    advantages = torch.tensor([[1.0, 1.0, -1.0, -2.0]])
    out = ppo_clip_loss(logprobs, old, advantages, torch.ones(1, 4), normaliser=4.0, clip_low=0.2, clip_high=0.28)
    r = [1.0, math.exp(0.5), math.exp(-0.5), math.exp(0.1)]
    # token 1: min(r*A, 1.28*A) = 1.28 (clipped high); token 2: A<0, min(-r, -0.8) = -0.8 (clipped low)
    # token 3: A=-2, r=1.105 inside the range: -2r
    per_token = [-1.0, -1.28, 0.8, 2 * r[3]]
    assert out.loss.item() == pytest.approx(sum(per_token) / 4, abs=1e-6)
    assert out.metrics["clip_frac_high"].item() == pytest.approx(0.25)
    assert out.metrics["clip_frac_low"].item() == pytest.approx(0.25)
    assert out.metrics["dual_clip_frac"].item() == 0
    assert out.metrics["approx_kl"].item() == pytest.approx(sum(x - 1 - math.log(x) for x in r) / 4, abs=1e-6)
    out.loss.backward()
    # d/dlogp of -r*A is -r*A for unclipped tokens, 0 for clipped ones; divided by the normaliser
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0 / 4, 0.0, 0.0, 2 * r[3] / 4]]))


def test_dual_clip_bounds_the_loss_of_a_runaway_negative_token():
    # A = -1, ratio e^1.5 = 4.48: the clipped surrogate gives 4.48, dual clip caps it at 3 with no gradient
    logprobs = leaf([1.5])
    out = ppo_clip_loss(logprobs, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1), 1.0, dual_clip=3.0)
    assert out.loss.item() == pytest.approx(3.0)
    assert out.metrics["dual_clip_frac"].item() == 1
    out.loss.backward()
    assert logprobs.grad.item() == 0
    off = ppo_clip_loss(leaf([1.5]), torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1), 1.0, dual_clip=0.0)
    assert off.loss.item() == pytest.approx(math.exp(1.5), rel=1e-6)


def test_loss_ignores_masked_tokens_and_uses_the_given_normaliser():
    logprobs = torch.tensor([[0.3, 9.0]])
    out = ppo_clip_loss(logprobs, torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([[1.0, 0.0]]), normaliser=10.0)
    assert out.loss.item() == pytest.approx(-min(math.exp(0.3), 1.2) / 10)


def test_gspo_uses_the_sequence_ratio_with_token_gradients():
    # log ratios 0.1, 0.3 -> s = e^0.2; A = 1; seq-mean-token-mean over one sample
    logprobs, old = leaf([0.1, 0.3]), torch.zeros(1, 2)
    s = math.exp(0.2)
    out = gspo_loss(logprobs, old, torch.ones(1, 2), torch.ones(1, 2), 1.0, clip_low=0.5, clip_high=0.5)
    assert out.loss.item() == pytest.approx(-s, rel=1e-6)
    out.loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-s / 2, -s / 2]]))
    clipped = gspo_loss(leaf([0.1, 0.3]), old, torch.ones(1, 2), torch.ones(1, 2), 1.0, clip_low=0.1, clip_high=0.1)
    assert clipped.loss.item() == pytest.approx(-1.1)
    assert clipped.metrics["clip_frac_high"].item() == pytest.approx(1.0)


def test_cispo_keeps_the_gradient_of_clipped_tokens_scaled_by_the_clipped_weight():
    # ratio e^0.5 = 1.65 clipped to 1.28; loss = -1.28 * A * logp with logp = -1 (old -1.5)
    logprobs = leaf([-1.0])
    out = cispo_loss(logprobs, torch.tensor([[-1.5]]), torch.ones(1, 1), torch.ones(1, 1), 1.0, clip_high=0.28)
    assert out.loss.item() == pytest.approx(1.28)
    assert out.metrics["clip_frac_high"].item() == 1
    out.loss.backward()
    assert logprobs.grad.item() == pytest.approx(-1.28)


def test_gpg_is_the_plain_policy_gradient():
    logprobs = leaf([-2.0])
    out = gpg_loss(logprobs, torch.tensor([[-2.0]]), torch.tensor([[0.5]]), torch.ones(1, 1), 1.0)
    assert out.loss.item() == pytest.approx(1.0)
    out.loss.backward()
    assert logprobs.grad.item() == pytest.approx(-0.5)


def test_gmpo_clips_token_log_ratios_by_the_sign_of_the_advantage():
    old, mask = torch.zeros(1, 2), torch.ones(1, 2)
    # A = +1: min(lr, clip(lr)) = [0.4, -0.1] -> geometric ratio e^0.15
    positive = leaf([0.5, -0.1])
    out = gmpo_loss(positive, old, torch.ones(1, 2), mask, 1.0, clip_low=0.4, clip_high=0.4)
    assert out.loss.item() == pytest.approx(-math.exp(0.15), rel=1e-6)
    out.loss.backward()
    # the clipped token has no gradient; the other gets d(-e^{mean})/dlr = -e^0.15 / 2
    torch.testing.assert_close(positive.grad, torch.tensor([[0.0, -math.exp(0.15) / 2]]))
    # A = -1: max(lr, clip(lr)) = [0.5, -0.1] -> e^0.2, loss +e^0.2
    negative = gmpo_loss(leaf([0.5, -0.1]), old, -torch.ones(1, 2), mask, 1.0, clip_low=0.4, clip_high=0.4)
    assert negative.loss.item() == pytest.approx(math.exp(0.2), rel=1e-6)


def test_sapo_gate_is_the_policy_gradient_at_ratio_one_and_soft_beyond():
    logprobs = leaf([0.0, 0.0])
    advantages = torch.tensor([[1.0, -1.0]])
    out = sapo_loss(logprobs, torch.zeros(1, 2), advantages, torch.ones(1, 2), 1.0, tau_positive=1.0, tau_negative=1.05)
    assert out.loss.item() == pytest.approx(-2.0 + 2 / 1.05, abs=1e-6)  # f(1) = 2 / tau
    out.loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, 1.0]]))  # f'(1) = 1
    far = leaf([0.5])
    sapo_loss(far, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), 1.0, tau_positive=1.0).loss.backward()
    r = math.exp(0.5)
    sigma = 1 / (1 + math.exp(-(r - 1)))
    assert far.grad.item() == pytest.approx(-4 * sigma * (1 - sigma) * r, rel=1e-5)  # d/dlogp of -f(e^logp)


def test_clip_cov_detaches_one_high_covariance_token():
    # logp [0, 0, -4] (mean -4/3), A [2, -1, -1] (mean 0): covariance [2.67, -1.33, 2.67]; ratio 1 (no clip).
    logprobs = leaf([0.0, 0.0, -4.0])
    old = logprobs.detach().clone()
    advantages = torch.tensor([[2.0, -1.0, -1.0]])
    out = clip_cov_loss(logprobs, old, advantages, torch.ones(1, 3), 3.0, generator=torch.Generator().manual_seed(0))
    assert out.loss.item() == pytest.approx(0.0)  # -(2 - 1 - 1) / 3: the value is the plain surrogate
    assert out.metrics["cov_frac"].item() == pytest.approx(1 / 3)
    out.loss.backward()
    grads = logprobs.grad[0].tolist()
    assert grads[1] == pytest.approx(1 / 3)  # outside the window: keeps its gradient -A / 3
    first_detached = grads[0] == pytest.approx(0.0) and grads[2] == pytest.approx(1 / 3)
    last_detached = grads[0] == pytest.approx(-2 / 3) and grads[2] == pytest.approx(0.0)
    assert first_detached or last_detached, grads  # exactly one of the two candidates lost its gradient


def test_kl_cov_penalises_the_top_covariance_token():
    # logp [0, -1, -4] (mean -5/3), A [2, -1, -1]: covariance [3.33, -0.67, 2.33] -> token 0 is the top one
    logprobs = torch.tensor([[0.0, -1.0, -4.0]])
    old = torch.tensor([[-0.5, -1.0, -4.0]])  # token 0 has log ratio 0.5
    out = kl_cov_loss(logprobs, old, torch.tensor([[2.0, -1.0, -1.0]]), torch.ones(1, 3), 3.0, cov_kl_coef=0.1)
    expected = (-2 * math.exp(0.5) + 0.1 * 0.5 + 1 + 1) / 3
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    assert out.metrics["cov_frac"].item() == pytest.approx(1 / 3)


def test_dro_is_policy_gradient_plus_a_squared_log_ratio_penalty():
    logprobs = leaf([-1.0])
    out = dro_loss(logprobs, torch.tensor([[-1.5]]), torch.tensor([[2.0]]), torch.ones(1, 1), 1.0, beta=0.05)
    assert out.loss.item() == pytest.approx(2.0 + 0.025 * 0.25)
    out.loss.backward()
    assert logprobs.grad.item() == pytest.approx(-2.0 + 0.05 * 0.5)


def test_truncated_importance_weights_cap_the_train_over_rollout_ratio():
    weights = truncated_importance_weights(torch.zeros(1, 2), torch.tensor([[-1.0, 0.5]]), cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, math.exp(-0.5)]]))
    weighted = ppo_clip_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), 2.0,
                             token_weights=weights)  # fmt: skip
    assert weighted.loss.item() == pytest.approx(-(2.0 + math.exp(-0.5)) / 2)


def test_clipped_value_loss():
    returns, old = torch.tensor([[2.0]]), torch.tensor([[0.5]])
    # V = 1.0 moved 0.5 from V_old: clipped to 0.7, (0.7 - 2)^2 = 1.69 > (1 - 2)^2 = 1 -> 0.845, no gradient
    values = leaf([1.0])
    out = value_loss(values, old, returns, torch.ones(1, 1), 1.0, value_clip=0.2)
    assert out.loss.item() == pytest.approx(0.845)
    assert out.metrics["value_clip_frac"].item() == 1
    out.loss.backward()
    assert values.grad.item() == 0
    # V = 0.6 within the clip: 0.5 * (0.6 - 2)^2 = 0.98, gradient V - G = -1.4
    values = leaf([0.6])
    out = value_loss(values, old, returns, torch.ones(1, 1), 1.0, value_clip=0.2)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.98) and values.grad.item() == pytest.approx(-1.4)


VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("token-sum", 7.0),
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2 samples
        ("seq-mean-token-mean", 2.75),  # (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", 7 / 8),  # 7 / (2 samples x 4 max_response_tokens)
    ],
)
def test_aggregation_modes(mode, expected):
    normaliser = loss_normaliser(mode, MASK, max_response_tokens=4)
    assert aggregate(VALUES, MASK, normaliser, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_micro_batch_shares_with_the_global_normaliser_sum_to_the_full_batch(mode):
    normaliser = loss_normaliser(mode, MASK, max_response_tokens=4)
    parts = sum(aggregate(VALUES[i : i + 1], MASK[i : i + 1], normaliser, mode) for i in range(2))
    assert parts.item() == pytest.approx(aggregate(VALUES, MASK, normaliser, mode).item())


def test_seq_mean_normaliser_counts_only_samples_with_trained_tokens():
    assert loss_normaliser("seq-mean-token-mean", torch.tensor([[1.0, 0.0], [0.0, 0.0]]), 4) == 1.0
    with pytest.raises(ValueError, match="available: token-mean"):
        loss_normaliser("mean", MASK, 4)


def test_nll_loss_is_mean_negative_logprob_of_targets():
    out = nll_loss(torch.tensor([[-1.0, -3.0, -100.0]]), torch.tensor([[1.0, 1.0, 0.0]]), normaliser=2.0)
    assert out.loss.item() == pytest.approx(2.0)


token_batches = st.integers(1, 6).flatmap(
    lambda rows: st.tuples(
        st.lists(st.lists(st.floats(-5, 5, width=32), min_size=5, max_size=5), min_size=rows, max_size=rows),
        st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=rows, max_size=rows),
        st.integers(1, rows),
    )
)


@settings(max_examples=60, deadline=None)
@given(batch=token_batches, mode=st.sampled_from(AGGREGATIONS))
def test_any_micro_batch_split_equals_the_full_batch(batch, mode):
    values, mask, micro = torch.tensor(batch[0]), torch.tensor(batch[1], dtype=torch.float32), batch[2]
    normaliser = loss_normaliser(mode, mask, max_response_tokens=5)
    full = aggregate(values, mask, normaliser, mode)
    parts = sum(
        aggregate(values[i : i + micro], mask[i : i + micro], normaliser, mode) for i in range(0, len(values), micro)
    )
    assert float(parts) == pytest.approx(float(full), rel=1e-4, abs=1e-4)


@settings(max_examples=60, deadline=None)
@given(
    advantages=st.lists(st.floats(-5, 5, width=32), min_size=4, max_size=4),
    logprobs=st.lists(st.floats(-8, 0, width=32), min_size=4, max_size=4),
)
def test_nothing_is_clipped_when_the_policy_equals_the_old_policy(advantages, logprobs):
    logprobs_tensor, advantages_tensor = torch.tensor([logprobs]), torch.tensor([advantages])
    for loss in (ppo_clip_loss, gspo_loss, cispo_loss, gmpo_loss):
        out = loss(logprobs_tensor, logprobs_tensor.clone(), advantages_tensor, torch.ones(1, 4), 4.0)
        assert out.metrics["clip_frac_low"].item() == 0 and out.metrics["clip_frac_high"].item() == 0
        assert out.metrics["approx_kl"].item() == pytest.approx(0.0, abs=1e-6)
