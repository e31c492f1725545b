"""KL estimators between the policy and a reference model, per token (Schulman, "Approximating KL
Divergence", 2020). Samples come from the policy; log_ratio = logprobs - ref_logprobs."""

from __future__ import annotations

import torch

# exp() of a log-ratio beyond this overflows float32; the bound only matters for pathological tokens.
_MAX_LOG_RATIO = 20.0


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL(policy || reference) estimate, [B, R] -> [B, R].

    k1: log r                     (unbiased, high variance, can be negative)
    k2: (log r)^2 / 2             (biased, low variance; its gradient is that of the true KL)
    k3: (1/r - 1) + log r, with 1/r = ref/policy   (unbiased, low variance, >= 0)
    where log r = logprobs - ref_logprobs.
    """
    log_ratio = (logprobs - ref_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1 + log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}; available: k1, k2, k3")


KL_ESTIMATORS = ("k1", "k2", "k3")
