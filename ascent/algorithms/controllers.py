"""Coefficient controllers: pure update rules for the KL and entropy coefficients.

The trainer keeps the current coefficients as state (`ControllerState`) and calls these once per step.
"""

from __future__ import annotations

import math


def adaptive_kl_coef(coef: float, observed_kl: float, target_kl: float, horizon: float, num_samples: int) -> float:
    """The next KL coefficient of the proportional controller of Ziegler et al. 2019 (arXiv:1909.08593, eq. 2).

    error = clip(observed_kl / target_kl - 1, -0.2, 0.2);  coef <- coef * (1 + error * num_samples / horizon).
    The coefficient grows while the policy drifts further from the reference than the target, and
    shrinks while it stays closer; the clip bounds each change to 20% of num_samples / horizon. The
    config requires horizon > 0.2 * num_samples, so the factor stays positive.
    """
    error = min(max(observed_kl / target_kl - 1, -0.2), 0.2)
    return coef * (1 + error * num_samples / horizon)


def adaptive_entropy_coef(
    coef: float, entropy: float, target: float, delta: float, max_coef: float, min_coef: float = 0.0
) -> float:
    """The next entropy coefficient of Skywork-OR1's adaptive entropy control (He et al. 2025,
    arXiv:2505.22312, section 3.2.4): c <- c + delta when entropy is below the target, c - delta above it,
    kept within [min_coef, max_coef]. Paired with `entropy_bonus_active`: the bonus is only applied while
    entropy is at or below the target."""
    step = delta if entropy < target else -delta
    return min(max(coef + step, min_coef), max_coef)


def entropy_bonus_active(entropy: float, target: float) -> bool:
    """Skywork-OR1 applies the entropy bonus only while entropy <= target, so it never pushes entropy up
    once the target is reached."""
    return entropy <= target or math.isclose(entropy, target)
