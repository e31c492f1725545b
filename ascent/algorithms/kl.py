"""KL between the policy and a reference model: per-token estimators.

Estimators follow Schulman, "Approximating KL Divergence" (2020). Samples come from the policy and
log r = logprobs - ref_logprobs, so every estimator targets KL(policy || reference).
"""

from __future__ import annotations

import torch

# exp() of a log-ratio beyond this overflows float32; the bound only matters for pathological tokens.
_MAX_LOG_RATIO = 20.0
_MAX_K3 = 10.0

KL_ESTIMATORS = ("k1", "abs", "k2", "k3", "k1+", "abs+", "k3+")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL(policy || reference) estimate, [B, R] float32 -> [B, R].

    k1:  log r                       unbiased, high variance, can be negative
    abs: |log r|
    k2:  (log r)^2 / 2               biased, low variance; its gradient is the true KL's gradient
    k3:  (1/r - 1) + log r, 1/r = ref/policy     unbiased, low variance, >= 0; capped at 10
    A trailing "+" (k1+, abs+, k3+) is straight-through: the value of the named estimator with the
    gradient of k2, so the logged value stays unbiased while the gradient is the unbiased one.
    """
    if estimator.endswith("+") and estimator in KL_ESTIMATORS:
        value = kl_penalty(logprobs, ref_logprobs, estimator[:-1])
        gradient = kl_penalty(logprobs, ref_logprobs, "k2")
        return gradient + (value - gradient).detach()
    log_ratio = (logprobs - ref_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    if estimator == "k1":
        return log_ratio
    if estimator == "abs":
        return log_ratio.abs()
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":  # bounded like verl's low_var_kl: one runaway token must not swamp the loss
        return (torch.exp(-log_ratio) - 1 + log_ratio).clamp(max=_MAX_K3)
    raise ValueError(f"unknown KL estimator {estimator!r}; available: {', '.join(KL_ESTIMATORS)}")
