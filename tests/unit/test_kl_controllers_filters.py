"""KL estimators, coefficient controllers, filters and the learning-rate schedule."""

import pytest
import torch

from ascent.algorithms.controllers import adaptive_entropy_coef, adaptive_kl_coef, entropy_bonus_active
from ascent.algorithms.filters import informative_samples, mask_truncated, overlong_penalty
from ascent.algorithms.kl import kl_penalty
from ascent.workers.optim import lr_multiplier

LOGPROBS, REF = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
LOG_R = torch.tensor([[0.5, -1.0]])


def test_kl_estimators():
    torch.testing.assert_close(kl_penalty(LOGPROBS, REF, "k1"), LOG_R)
    torch.testing.assert_close(kl_penalty(LOGPROBS, REF, "abs"), LOG_R.abs())
    torch.testing.assert_close(kl_penalty(LOGPROBS, REF, "k2"), 0.5 * LOG_R**2)
    torch.testing.assert_close(kl_penalty(LOGPROBS, REF, "k3"), torch.exp(-LOG_R) - 1 + LOG_R)
    assert (kl_penalty(LOGPROBS, REF, "k3") >= 0).all()
    assert torch.equal(kl_penalty(REF, REF, "k3"), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="k1, abs, k2, k3"):
        kl_penalty(LOGPROBS, REF, "k4")


def test_k3_is_capped_for_a_runaway_token():
    assert kl_penalty(torch.tensor([[-30.0]]), torch.tensor([[0.0]]), "k3").item() == 10.0


@pytest.mark.parametrize("estimator", ["k1", "abs", "k3"])
def test_straight_through_estimators_have_their_value_and_the_gradient_of_k2(estimator):
    logprobs = LOGPROBS.clone().requires_grad_(True)
    value = kl_penalty(logprobs, REF, estimator + "+")
    torch.testing.assert_close(value, kl_penalty(LOGPROBS, REF, estimator))
    value.sum().backward()
    torch.testing.assert_close(logprobs.grad, LOG_R)  # d/dlogp of (log r)^2 / 2 is log r


def test_adaptive_kl_controller_moves_towards_the_target_by_at_most_20_percent_of_n_over_horizon():
    # observed twice the target: error clipped to +0.2 -> coef * (1 + 0.2 * 256 / 10000)
    assert adaptive_kl_coef(0.1, 0.2, 0.1, 10000, 256) == pytest.approx(0.1 * 1.00512)
    # observed half the target: error -0.5 clipped to -0.2
    assert adaptive_kl_coef(0.1, 0.05, 0.1, 10000, 256) == pytest.approx(0.1 * (1 - 0.00512))
    # 5% above the target: error 0.05, unclipped
    assert adaptive_kl_coef(0.1, 0.105, 0.1, 1000, 100) == pytest.approx(0.1 * 1.005)


def test_adaptive_entropy_coefficient_steps_towards_the_target_within_bounds():
    assert adaptive_entropy_coef(0.0, entropy=0.1, target=0.2, delta=1e-4, max_coef=5e-3) == pytest.approx(1e-4)
    assert adaptive_entropy_coef(5e-3, entropy=0.1, target=0.2, delta=1e-4, max_coef=5e-3) == 5e-3  # at the cap
    assert adaptive_entropy_coef(2e-4, entropy=0.3, target=0.2, delta=1e-4, max_coef=5e-3) == pytest.approx(1e-4)
    assert adaptive_entropy_coef(0.0, entropy=0.3, target=0.2, delta=1e-4, max_coef=5e-3) == 0.0  # floor
    assert entropy_bonus_active(0.1, 0.2) and entropy_bonus_active(0.2, 0.2) and not entropy_bonus_active(0.3, 0.2)


def test_informative_samples_are_those_of_groups_with_different_rewards():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 5.0])
    groups = torch.tensor([0, 0, 3, 3, 9])
    assert informative_samples(rewards, groups).tolist() == [False, False, True, True, False]


def test_overlong_penalty_ramps_over_the_buffer():
    # max 10 tokens, buffer 4: no penalty up to 6, then -0.25 per token, -1 at the limit
    penalty = overlong_penalty(torch.tensor([5, 6, 8, 10]), 10, 4, penalty=1.0)
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.0, -0.5, -1.0]))
    torch.testing.assert_close(overlong_penalty(torch.tensor([10]), 10, 4, penalty=0.5), torch.tensor([-0.5]))
    assert torch.equal(overlong_penalty(torch.tensor([10]), 10, 0), torch.zeros(1))


def test_mask_truncated_removes_samples_cut_at_the_length_limit():
    mask = torch.ones(3, 2)
    masked = mask_truncated(mask, ["stop", "length", "stop"])
    assert masked.tolist() == [[1, 1], [0, 0], [1, 1]]
    assert mask.sum() == 6  # the input is not modified


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
