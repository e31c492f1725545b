"""Policy losses and loss aggregation: pure functions with explicit normalisers.

Every loss returns its micro-batch's *share* of the mini-batch value: sums divided by a normaliser
computed once for the whole mini-batch (`loss_normaliser`). Summing the shares of all micro-batches
(and data-parallel ranks) therefore equals one pass over the full batch, gradients included.

Shared arguments, all [B, R] float32 unless said otherwise:
- logprobs: log pi_theta(token), with grad; old_logprobs: the policy that sampled / that the advantages
  were computed for (no grad); advantages; loss_mask: 1 = token is trained on.
- token_weights: optional per-token importance weights (truncated IS), applied to the per-token loss.
Every loss reports `pg_loss` plus the metrics that make sense for it (clip fractions, approx KL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, differentiable
    metrics: dict[str, torch.Tensor]  # scalars (detached), each a share of the mini-batch value


AGGREGATIONS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def loss_normaliser(mode: str, loss_mask: torch.Tensor, max_response_tokens: int) -> float:
    """The global normaliser of aggregation `mode` for a whole mini-batch (loss_mask [B, R]).

    token-mean: trained tokens. token-sum: 1. seq-mean-token-sum / seq-mean-token-mean: samples with at
    least one trained token. seq-mean-token-sum-norm (Dr.GRPO, arXiv:2503.20783): all samples times
    max_response_tokens, a constant that does not depend on the lengths sampled.
    """
    if mode == "token-mean":
        return float(loss_mask.sum().clamp(min=1))
    if mode == "token-sum":
        return 1.0
    if mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        return float((loss_mask.sum(-1) > 0).sum().clamp(min=1))
    if mode == "seq-mean-token-sum-norm":
        return float(loss_mask.shape[0] * max_response_tokens)
    raise ValueError(f"unknown loss aggregation {mode!r}; available: {', '.join(AGGREGATIONS)}")


def aggregate(token_values: torch.Tensor, loss_mask: torch.Tensor, normaliser: float, mode: str) -> torch.Tensor:
    """Reduce [B, R] per-token values to a scalar share of the mini-batch value.

    token-mean, token-sum, seq-mean-token-sum, seq-mean-token-sum-norm: sum(values * mask) / normaliser
    (they differ only in the normaliser). seq-mean-token-mean: sum_i mean_t(values_i) / normaliser, each
    sample's tokens averaged first, so every sample weighs the same whatever its length.
    """
    masked = token_values * loss_mask
    if mode == "seq-mean-token-mean":
        return (masked.sum(-1) / loss_mask.sum(-1).clamp(min=1)).sum() / normaliser
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; available: {', '.join(AGGREGATIONS)}")
    return masked.sum() / normaliser


def _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics) -> LossOutput:
    if token_weights is not None:
        token_losses = token_losses * token_weights
    loss = aggregate(token_losses, loss_mask, normaliser, aggregation)
    shares = {name: aggregate(value.float(), loss_mask, normaliser, aggregation) for name, value in metrics.items()}
    return LossOutput(loss=loss, metrics={"pg_loss": loss.detach(), **shares})


def _approx_kl(log_ratio: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(old || new) per token, from samples of the old policy: rho - 1 - log rho."""
    return torch.expm1(log_ratio) - log_ratio


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    token_weights: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = 3.0,
) -> LossOutput:
    """PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347, eq. 7) with DAPO's asymmetric range
    (clip-higher, arXiv:2503.14476) and dual clip (Ye et al. 2020, arXiv:1912.09729).

    per token: L = max(-rho * A, -clip(rho, 1 - clip_low, 1 + clip_high) * A), rho = exp(logp - old_logp);
    when A < 0 and dual_clip > 1: L = min(L, -dual_clip * A), which bounds the loss of a negative-advantage
    token whose ratio ran away. dual_clip 0 switches it off.
    Metrics: clip_frac_low / clip_frac_high (tokens whose gradient the clip removed on each side),
    dual_clip_frac, approx_kl (k3 of KL(old || new)).
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    token_losses = torch.maximum(-ratio * advantages, -clipped_ratio * advantages)
    dual_clipped = torch.zeros_like(token_losses, dtype=torch.bool)
    if dual_clip:
        dual_clipped = (advantages < 0) & (token_losses > -dual_clip * advantages)
        token_losses = torch.where(dual_clipped, -dual_clip * advantages, token_losses)
    with torch.no_grad():
        metrics = {
            "clip_frac_low": (ratio < 1 - clip_low) & (advantages < 0),
            "clip_frac_high": (ratio > 1 + clip_high) & (advantages > 0),
            "dual_clip_frac": dual_clipped,
            "approx_kl": _approx_kl(log_ratio),
        }
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


# exp(10) is already a ratio no clip range lets through; the bound keeps exp() finite for a runaway sample.
_MAX_SEQUENCE_LOG_RATIO = 10.0


def sequence_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean token log-ratio of each sample: [B, R] -> [B]; the log of GSPO's length-normalised ratio."""
    return ((logprobs - old_logprobs) * loss_mask).sum(-1) / loss_mask.sum(-1).clamp(min=1)


def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "seq-mean-token-mean",
    token_weights: torch.Tensor | None = None,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> LossOutput:
    """GSPO (Zheng et al. 2025, arXiv:2507.18071, eq. 5-7, the token-level GSPO-token form).

    s_i = exp(mean_t(logp - old_logp)) over sample i's trained tokens; per token the ratio is
    s_{i,t} = sg(s_i) * pi(y_t) / sg(pi(y_t)): its value is s_i, its gradient that of the token's logp.
    L = max(-s * A, -clip(s, 1 - clip_low, 1 + clip_high) * A). With one advantage per sample (GRPO) this
    equals the sequence-level objective; clip ranges are ~1e-4 because s is a geometric mean.
    """
    sequence = sequence_log_ratio(logprobs, old_logprobs, loss_mask).unsqueeze(-1)
    log_ratio = sequence.detach().clamp(max=_MAX_SEQUENCE_LOG_RATIO) + logprobs - logprobs.detach()
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    token_losses = torch.maximum(-ratio * advantages, -clipped * advantages)
    with torch.no_grad():
        metrics = {
            "clip_frac_low": (ratio < 1 - clip_low) & (advantages < 0),
            "clip_frac_high": (ratio > 1 + clip_high) & (advantages > 0),
            "approx_kl": _approx_kl(logprobs - old_logprobs),
        }
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    token_weights: torch.Tensor | None = None,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
) -> LossOutput:
    """CISPO (MiniMax 2025, arXiv:2506.13585, eq. 4-5): clip the importance weight, not the update.

    L = -sg(clip(rho, 1 - clip_low, 1 + clip_high)) * A * logp. Every token keeps a gradient (scaled by
    the clipped weight), unlike PPO which drops the gradient of clipped tokens. clip_low 1 = no floor.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio.detach())
    weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    token_losses = -weight * advantages * logprobs
    with torch.no_grad():
        metrics = {
            "clip_frac_low": ratio < 1 - clip_low,
            "clip_frac_high": ratio > 1 + clip_high,
            "approx_kl": _approx_kl(log_ratio),
        }
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def gpg_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    token_weights: torch.Tensor | None = None,
) -> LossOutput:
    """GPG (Chu et al. 2025, arXiv:2504.02546, eq. 8): plain policy gradient, L = -logp * A. No ratio and
    no clip: GPG takes one update per batch, on-policy. approx_kl is reported for monitoring only."""
    token_losses = -logprobs * advantages
    with torch.no_grad():
        metrics = {"approx_kl": _approx_kl(logprobs - old_logprobs)}
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def gmpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "seq-mean-token-mean",
    token_weights: torch.Tensor | None = None,
    clip_low: float = 0.4,
    clip_high: float = 0.4,
) -> LossOutput:
    """GMPO (Zhao et al. 2025, arXiv:2507.20673, eq. 5): the geometric mean of token ratios, clipped per
    token in log space.

    Per token, sign-aware: l_t = sgn(A) * min(sgn(A) * log rho_t, sgn(A) * clip(log rho_t, -clip_low,
    clip_high)); per sample i: L_i = -A_i * exp(mean_t l_t), A_i the mean advantage of i's trained tokens.
    Every trained token of i carries L_i (as in GSPO), so the default seq-mean-token-mean is the paper's
    mean over samples; token-mean would weight samples by length.
    """
    log_ratio = logprobs - old_logprobs
    sign = torch.sign(advantages)
    clipped = torch.clamp(log_ratio, -clip_low, clip_high)
    signed = sign * torch.minimum(sign * log_ratio, sign * clipped)
    lengths = loss_mask.sum(-1).clamp(min=1)
    geometric_ratio = torch.exp((signed * loss_mask).sum(-1) / lengths)
    sequence_advantage = (advantages * loss_mask).sum(-1) / lengths
    token_losses = (-sequence_advantage * geometric_ratio).unsqueeze(-1).expand_as(logprobs)
    with torch.no_grad():
        metrics = {
            "clip_frac_low": (log_ratio < -clip_low) & (advantages < 0),
            "clip_frac_high": (log_ratio > clip_high) & (advantages > 0),
            "approx_kl": _approx_kl(log_ratio),
        }
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def sapo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    token_weights: torch.Tensor | None = None,
    tau_positive: float = 1.0,
    tau_negative: float = 1.05,
) -> LossOutput:
    """SAPO (Gao et al. 2025, arXiv:2511.20347, eq. 5-6): a smooth gate in place of the hard clip.

    L = -f(rho) * A, f(rho) = sigmoid(tau * (rho - 1)) * 4 / tau, tau = tau_positive if A > 0 else
    tau_negative. f(1) = 2 / tau and f'(1) = 1, so near the old policy this is the plain policy gradient;
    far from it the gradient weight sigmoid' decays smoothly instead of dropping to 0 at a clip edge.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, tau_positive, tau_negative)
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    token_losses = -gate * advantages
    with torch.no_grad():
        metrics = {"approx_kl": _approx_kl(log_ratio)}
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def token_covariance(logprobs: torch.Tensor, advantages: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Centred product (logp - mean logp) * (A - mean A) per trained token, means over trained tokens:
    each token's contribution to Cov(logp, A), which drives the change of policy entropy
    (Cui et al. 2025, arXiv:2505.22617, eq. 11). [B, R] float32, -inf where loss_mask is 0."""
    mask = loss_mask > 0
    count = mask.sum().clamp(min=1)
    logprobs = logprobs.detach()
    centred_logprobs = logprobs - (logprobs * mask).sum() / count
    centred_advantages = advantages - (advantages * mask).sum() / count
    covariance = centred_logprobs * centred_advantages
    return torch.where(mask, covariance, torch.full_like(covariance, float("-inf")))


def clip_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    token_weights: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    cov_fraction: float = 2e-4,
    cov_lower: float = 1.0,
    cov_upper: float = 5.0,
    generator: torch.Generator | None = None,
) -> LossOutput:
    """Clip-Cov (Cui et al. 2025, arXiv:2505.22617, section 5): the PPO clipped loss, plus: among the
    tokens the PPO clip left alone whose covariance (see `token_covariance`) lies in (cov_lower, cov_upper),
    a random `cov_fraction` of the trained tokens (at least one) get no gradient at all. Stopping the
    update of high-covariance tokens keeps entropy from collapsing. The selection is drawn from
    `generator` over the tokens passed in (one micro-batch).
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -ratio * advantages
    token_losses = torch.maximum(unclipped, -torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantages)
    covariance = token_covariance(logprobs, advantages, loss_mask)
    eligible = (covariance > cov_lower) & (covariance < cov_upper) & (token_losses <= unclipped)
    candidates = eligible.flatten().nonzero().squeeze(-1)
    num_selected = min(max(int(cov_fraction * float(loss_mask.sum())), 1), len(candidates))
    chosen = candidates[torch.randperm(len(candidates), generator=generator)[:num_selected].to(candidates.device)]
    detached = torch.zeros(loss_mask.numel(), dtype=torch.bool, device=loss_mask.device)
    detached[chosen] = True
    detached = detached.view_as(loss_mask)
    token_losses = torch.where(detached, token_losses.detach(), token_losses)
    with torch.no_grad():
        metrics = {
            "clip_frac_low": (ratio < 1 - clip_low) & (advantages < 0),
            "clip_frac_high": (ratio > 1 + clip_high) & (advantages > 0),
            "cov_frac": detached,
            "approx_kl": _approx_kl(log_ratio),
        }
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def kl_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    token_weights: torch.Tensor | None = None,
    cov_fraction: float = 2e-4,
    cov_kl_coef: float = 0.1,
) -> LossOutput:
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617, section 5): the unclipped surrogate -rho * A on every token,
    plus cov_kl_coef * |log rho| on the top `cov_fraction` of trained tokens (at least one) by covariance
    (see `token_covariance`), a KL leash on the tokens that drive entropy down. Ranked over the tokens passed
    in (one micro-batch).
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    covariance = token_covariance(logprobs, advantages, loss_mask).flatten()
    num_trained = int((loss_mask > 0).sum())
    penalised = torch.zeros(loss_mask.numel(), dtype=torch.bool, device=loss_mask.device)
    if num_trained:
        penalised[torch.topk(covariance, max(int(cov_fraction * num_trained), 1)).indices] = True
    penalised = penalised.view_as(loss_mask)
    token_losses = -ratio * advantages + cov_kl_coef * log_ratio.abs() * penalised
    with torch.no_grad():
        metrics = {"cov_frac": penalised, "approx_kl": _approx_kl(log_ratio)}
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def dro_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    token_weights: torch.Tensor | None = None,
    beta: float = 0.05,
) -> LossOutput:
    """DRO, direct reward optimisation with a squared log-ratio regulariser (Richemond et al. 2024,
    arXiv:2405.19107; the policy loss of Kimi k1.5, arXiv:2501.12599, eq. 3 in its per-token form).

    L = -logp * A + beta / 2 * (logp - old_logp)^2 per token: a plain policy gradient held near the policy
    that sampled by a quadratic penalty instead of a clip, so it tolerates off-policy (stale) samples.
    """
    log_ratio = logprobs - old_logprobs
    token_losses = -logprobs * advantages + 0.5 * beta * log_ratio**2
    with torch.no_grad():
        metrics = {"approx_kl": _approx_kl(log_ratio)}
    return _output(token_losses, loss_mask, normaliser, aggregation, token_weights, metrics)


def truncated_importance_weights(
    old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, cap: float
) -> torch.Tensor:
    """Truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"): w = min(pi_train_old / pi_rollout, cap) per token, no grad. It corrects for
    the rollout engine sampling from slightly different numbers than the trainer computes. [B, R]."""
    return torch.exp(old_logprobs - rollout_logprobs).clamp(max=cap).detach()


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    normaliser: float,
    aggregation: str = "token-mean",
    value_clip: float = 0.5,
) -> LossOutput:
    """PPO's clipped value loss (Schulman et al. 2017; the clipped form of OpenAI baselines' ppo2):

        L = 1/2 * max((V - G)^2, (V_old + clip(V - V_old, -value_clip, value_clip) - G)^2)

    so one update cannot move a value further than value_clip from the one GAE used; value_clip 0 = no clip.
    values [B, R] (with grad), old_values [B, R] (the critic before this step), returns G [B, R].
    Metrics: value_loss, value_clip_frac (tokens where the clipped branch is the larger), mean values.
    """
    unclipped = (values - returns) ** 2
    token_losses = 0.5 * unclipped
    clipped_larger = torch.zeros_like(unclipped, dtype=torch.bool)
    if value_clip:
        clipped_values = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        clipped = (clipped_values - returns) ** 2
        clipped_larger = clipped > unclipped
        token_losses = 0.5 * torch.maximum(unclipped, clipped)
    loss = aggregate(token_losses, loss_mask, normaliser, aggregation)
    with torch.no_grad():
        metrics = {
            "value_loss": loss.detach(),
            "value_clip_frac": aggregate(clipped_larger.float(), loss_mask, normaliser, aggregation),
            "values": aggregate(values.detach(), loss_mask, normaliser, aggregation),
        }
    return LossOutput(loss=loss, metrics=metrics)


def nll_loss(logprobs: torch.Tensor, loss_mask: torch.Tensor, normaliser: float) -> LossOutput:
    """Supervised fine-tuning: mean negative log-likelihood of the target tokens (loss_mask 1)."""
    loss = aggregate(-logprobs, loss_mask, normaliser, "token-mean")
    return LossOutput(loss=loss, metrics={"nll": loss.detach()})


POLICY_LOSSES: dict[str, Callable[..., LossOutput]] = {
    "ppo_clip": ppo_clip_loss,
    "gspo": gspo_loss,
    "cispo": cispo_loss,
    "gpg": gpg_loss,
    "gmpo": gmpo_loss,
    "sapo": sapo_loss,
    "clip_cov": clip_cov_loss,
    "kl_cov": kl_cov_loss,
    "dro": dro_loss,
}
