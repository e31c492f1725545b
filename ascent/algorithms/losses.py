"""Policy losses and loss aggregation: pure functions with explicit normalisers.

Every loss returns its micro-batch's *share* of the global mean: token sums divided by the normaliser
of the whole mini-batch (e.g. its number of trained tokens). Summing the shares of all micro-batches
(and data-parallel ranks) therefore equals one pass over the full batch, gradients included.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, differentiable
    metrics: dict[str, torch.Tensor]  # scalars (detached), each a share of the global token mean


def aggregate_token_losses(
    token_losses: torch.Tensor, loss_mask: torch.Tensor, normaliser: float, mode: str = "token-mean"
) -> torch.Tensor:
    """Reduce [B, R] per-token values to a scalar. `token-mean`: sum(values * mask) / normaliser, where the
    normaliser is the number of tokens with loss_mask 1 in the whole mini-batch (not this micro-batch)."""
    if mode != "token-mean":
        raise ValueError(f"unknown loss aggregation {mode!r}; available: token-mean")
    return (token_losses * loss_mask).sum() / normaliser


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: str = "token-mean",
) -> LossOutput:
    """PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347, eq. 7), with DAPO's asymmetric range.

    per token: -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A), rho = exp(logprobs - old_logprobs).

    logprobs [B, R] float32 (with grad), old_logprobs [B, R] float32 (the policy that the advantages were
    computed for), advantages [B, R] float32, loss_mask [B, R] (1 = token is trained on).
    Metrics: clip_frac_low/high (fraction of tokens whose gradient the clip removed on each side) and
    approx_kl, the k3 estimate of KL(old || new) = rho - 1 - log rho.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantages
    token_losses = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        clipped_low = ((ratio < 1 - clip_low) & (advantages < 0)).float()
        clipped_high = ((ratio > 1 + clip_high) & (advantages > 0)).float()
        approx_kl = ratio - 1 - log_ratio
        metrics = {
            "pg_loss": aggregate_token_losses(token_losses, loss_mask, normaliser, aggregation),
            "clip_frac_low": aggregate_token_losses(clipped_low, loss_mask, normaliser, aggregation),
            "clip_frac_high": aggregate_token_losses(clipped_high, loss_mask, normaliser, aggregation),
            "approx_kl": aggregate_token_losses(approx_kl, loss_mask, normaliser, aggregation),
        }
    return LossOutput(loss=aggregate_token_losses(token_losses, loss_mask, normaliser, aggregation), metrics=metrics)


def nll_loss(logprobs: torch.Tensor, loss_mask: torch.Tensor, normaliser: float) -> LossOutput:
    """Supervised fine-tuning: mean negative log-likelihood of the target tokens (loss_mask 1)."""
    loss = aggregate_token_losses(-logprobs, loss_mask, normaliser)
    return LossOutput(loss=loss, metrics={"nll": loss.detach()})


POLICY_LOSSES = {"ppo_clip": ppo_clip_loss}
