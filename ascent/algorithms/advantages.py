"""Advantage estimators: pure functions of rewards, masks, group ids (and values, for GAE).

Conventions shared by every function here:
- `rewards` [B]: each sample's sequence reward (minus its summed KL penalty when KL is in the reward).
- `token_rewards` [B, R] float32: the outcome score sits on the last trained token of each sample
  (see `token_level_rewards`), minus a per-token KL penalty when KL is in the reward.
- `loss_mask` [B, R]: 1 = token is trained on; 0 = padding, or tool/environment output in multi-turn.
- `group_ids` [B] int64: samples of the same prompt share an id (any values).
- Sequence-level estimators return [B]; `compute_advantages` broadcasts them over trained tokens.

Groups of size one and groups whose rewards are all equal carry no comparison, so every group-baseline
estimator (grpo, rloo, opo, gpg, grpo_passk) gives them advantage 0. Each docstring states its own case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class AdvantageOutput:
    advantages: torch.Tensor  # [B, R] float32, 0 where loss_mask is 0
    returns: torch.Tensor | None = None  # [B, R] float32, the critic's regression target (gae only)


@dataclass
class GroupStats:
    """Per-group statistics, in float64: a float32 mean of equal rewards can miss them by ~1e-8, which an
    std of the same size would blow up into a sizeable advantage."""

    index: torch.Tensor  # [B] int64, 0..G-1: the group of each sample
    counts: torch.Tensor  # [G] float64, samples per group
    means: torch.Tensor  # [G] float64, mean reward per group
    informative: torch.Tensor  # [G] bool, rewards not all equal (so never a group of one)

    def per_sample(self, values: torch.Tensor) -> torch.Tensor:
        return values[self.index]


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor) -> GroupStats:
    rewards = rewards.double()
    _, index = torch.unique(group_ids, return_inverse=True)
    num_groups = int(index.max()) + 1
    empty = torch.zeros(num_groups, dtype=torch.float64)
    counts = empty.index_add(0, index, torch.ones_like(rewards))
    means = empty.index_add(0, index, rewards) / counts
    lowest = torch.full_like(empty, float("inf")).scatter_reduce(0, index, rewards, "amin")
    highest = torch.full_like(empty, float("-inf")).scatter_reduce(0, index, rewards, "amax")
    return GroupStats(index=index, counts=counts, means=means, informative=highest > lowest)


def group_sum(values: torch.Tensor, stats: GroupStats) -> torch.Tensor:
    """Per-group sums [G] of per-sample values [B], in float64."""
    return torch.zeros_like(stats.counts).index_add(0, stats.index, values.double())


def group_std(rewards: torch.Tensor, stats: GroupStats) -> torch.Tensor:
    """Unbiased (n - 1) standard deviation per group [G]; 0 for groups of size one."""
    centred = rewards.double() - stats.per_sample(stats.means)
    return (group_sum(centred**2, stats) / (stats.counts - 1).clamp(min=1)).sqrt()


def _only_informative(advantages: torch.Tensor, stats: GroupStats) -> torch.Tensor:
    """Exactly 0 for samples of groups whose rewards are all equal (groups of one included); float32."""
    return torch.where(stats.per_sample(stats.informative), advantages, torch.zeros_like(advantages)).float()


def grpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO outcome advantage (Shao et al. 2024, arXiv:2402.03300, section 4.1.2).

    A_i = (r_i - mean_g(r)) / (std_g(r) + eps) over the samples of group g, std unbiased (n - 1).
    `std_normalize=False` gives Dr.GRPO's A_i = r_i - mean_g(r) (Liu et al. 2025, arXiv:2503.20783).
    Size-one groups: 0 (no baseline). Constant groups: 0 with either setting.

    rewards: [B] float; group_ids: [B] int64. Returns [B] float32.
    """
    stats = group_stats(rewards, group_ids)
    advantages = rewards.double() - stats.per_sample(stats.means)
    if std_normalize:
        advantages = advantages / (stats.per_sample(group_std(rewards, stats)) + eps)
    return _only_informative(advantages, stats)


def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024, arXiv:2402.14740, eq. 5; Kool et al. 2019).

    A_i = r_i - mean_{j != i} r_j = n / (n - 1) * (r_i - mean_g(r)), n = size of i's group.
    Size-one groups: 0 (there is no other sample). Constant groups: 0.

    rewards: [B] float; group_ids: [B] int64. Returns [B] float32.
    """
    stats = group_stats(rewards, group_ids)
    counts = stats.per_sample(stats.counts)
    advantages = counts / (counts - 1).clamp(min=1) * (rewards.double() - stats.per_sample(stats.means))
    return _only_informative(advantages, stats)


def opo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """OPO: the optimal baseline under a length-proportional gradient norm (Hao et al. 2025, arXiv:2505.23585).

    A_i = r_i - b_g,  b_g = sum_j(L_j r_j) / sum_j(L_j) over the samples j of group g, L = response length
    in trained tokens. Size-one groups: 0. Constant groups: 0 (b_g equals the common reward).

    rewards: [B] float; group_ids: [B] int64; lengths: [B] (trained tokens per sample). Returns [B] float32.
    """
    rewards, lengths = rewards.double(), lengths.double()
    stats = group_stats(rewards, group_ids)
    baselines = group_sum(lengths * rewards, stats) / group_sum(lengths, stats).clamp(min=1e-8)
    return _only_informative(rewards - stats.per_sample(baselines), stats)


def gpg_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_normalize: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """GPG advantage (Chu et al. 2025, arXiv:2504.02546, eq. 9-10): the group-centred reward rescaled by
    alpha = B / (B - M), where M is the number of samples in groups whose rewards are all equal (they get
    no gradient).

    A_i = alpha * (r_i - mean_g(r)) [/ (std_g(r) + eps) when std_normalize]. Under a token-mean loss over
    the whole batch, alpha undoes the dilution by samples that carry no gradient. Size-one groups: 0.
    Constant groups: 0. If every group is constant, alpha is 1 and every advantage is 0.

    rewards: [B] float; group_ids: [B] int64. Returns [B] float32.
    """
    stats = group_stats(rewards, group_ids)
    advantages = grpo_advantages(rewards, group_ids, std_normalize=std_normalize, eps=eps)
    num_informative = int(stats.per_sample(stats.informative).sum())
    alpha = len(rewards) / num_informative if num_informative else 1.0
    return alpha * advantages


def grpo_passk_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Pass@k training (Walder & Karkhanis 2025, arXiv:2505.15201, the max-reward estimator): only the best
    sample of each group is credited, with its margin over the runner-up.

    A_best = (r_best - r_second) [/ (std_g(r) + eps) when std_normalize]; every other sample gets 0.
    A tie for best gives margin 0. Size-one groups: 0. Constant groups: 0.

    rewards: [B] float; group_ids: [B] int64. Returns [B] float32.
    """
    rewards = rewards.double()
    stats = group_stats(rewards, group_ids)
    stds = group_std(rewards, stats)
    advantages = torch.zeros_like(rewards)
    for group in stats.informative.nonzero().squeeze(-1).tolist():
        members = (stats.index == group).nonzero().squeeze(-1)
        top2 = torch.topk(rewards[members], 2)  # on a tie for best the margin is 0, whichever is picked
        margin = top2.values[0] - top2.values[1]
        if std_normalize:
            margin = margin / (stds[group] + eps)
        advantages[members[top2.indices[0]]] = margin
    return advantages.float()


def whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the entries with mask 1 (std unbiased); masked entries come back as 0.
    With one entry or none there is no spread to normalise by: the input is returned masked."""
    count = mask.sum()
    if count < 2:
        return values * mask
    mean = (values * mask).sum() / count
    variance = (((values - mean) * mask) ** 2).sum() / (count - 1)
    whitened = (values - mean) * torch.rsqrt(variance + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


def discounted_returns(token_rewards: torch.Tensor, loss_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t'} where t' is the next trained token: tokens with loss_mask 0 (tool output,
    padding) neither add reward nor discount, the running return passes through them unchanged.

    token_rewards, loss_mask: [B, R]. Returns [B, R] float32, 0 where loss_mask is 0.
    """
    returns = torch.zeros_like(token_rewards, dtype=torch.float32)
    running = torch.zeros(token_rewards.shape[0])
    for t in reversed(range(token_rewards.shape[1])):
        trained = loss_mask[:, t] > 0
        running = torch.where(trained, token_rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    return returns * loss_mask


def gae_advantages(
    token_rewards: torch.Tensor, values: torch.Tensor, loss_mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> AdvantageOutput:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv:1506.02438, eq. 16), per token.

    Over the trained tokens t < t' (t' the next trained token; V = 0 after the last):
        delta_t = r_t + gamma * V_{t'} - V_t,    A_t = delta_t + gamma * lam * A_{t'},    return_t = A_t + V_t.
    Tokens with loss_mask 0 (tool or environment output in a multi-turn sample) are skipped, so the
    running value and advantage carry across them instead of resetting. Advantages are then whitened
    over all trained tokens of the batch (as PPO for LLMs does); returns are not.

    token_rewards, values, loss_mask: [B, R] float. Returns advantages and returns, [B, R] float32.
    """
    batch_size, length = token_rewards.shape
    advantages = torch.zeros(batch_size, length)
    next_value = torch.zeros(batch_size)
    next_advantage = torch.zeros(batch_size)
    for t in reversed(range(length)):
        trained = loss_mask[:, t] > 0
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        next_value = torch.where(trained, values[:, t].float(), next_value)
        next_advantage = torch.where(trained, advantage, next_advantage)
        advantages[:, t] = advantage
    returns = (advantages + values) * loss_mask
    return AdvantageOutput(advantages=whiten(advantages, loss_mask), returns=returns)


def reinforce_pp_advantages(token_rewards: torch.Tensor, loss_mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++ (Hu et al. 2025, arXiv:2501.03262, eq. 7-8): discounted token returns (the KL penalty
    is part of token_rewards when KL is in the reward), whitened over all trained tokens of the batch.
    There are no groups; a constant-reward batch whitens to 0 (up to the KL term).

    token_rewards, loss_mask: [B, R]. Returns [B, R] float32.
    """
    return whiten(discounted_returns(token_rewards, loss_mask, gamma), loss_mask)


def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor, loss_mask: torch.Tensor, group_ids: torch.Tensor
) -> torch.Tensor:
    """REINFORCE++-baseline (arXiv:2501.03262 v2, section 3.2): subtract the group mean of the sequence
    rewards, broadcast over trained tokens, then whiten over all trained tokens of the batch.

    Size-one and constant groups are 0 before whitening; whitening shifts them by -mean/std of the
    batch, which is small but not 0 (as in the paper). rewards: [B]; loss_mask: [B, R]; group_ids: [B].
    Returns [B, R] float32.
    """
    stats = group_stats(rewards, group_ids)
    centred = _only_informative(rewards.double() - stats.per_sample(stats.means), stats)
    return whiten(centred.unsqueeze(-1) * loss_mask, loss_mask)


def remax_advantages(
    token_rewards: torch.Tensor, loss_mask: torch.Tensor, baseline_rewards: torch.Tensor
) -> torch.Tensor:
    """ReMax (Li et al. 2024, arXiv:2310.10505, algorithm 1): the reward of the greedy response to the same
    prompt is the baseline. A_t = sum_{t' >= t} r_t' - b, b = greedy sample's reward; without KL in the
    reward this is r - b on every trained token. Groups play no role; a sample equal to its greedy
    response's reward gets 0.

    token_rewards, loss_mask: [B, R]; baseline_rewards: [B] (the greedy reward of each sample's prompt).
    Returns [B, R] float32.
    """
    returns = discounted_returns(token_rewards, loss_mask, gamma=1.0)
    return (returns - baseline_rewards.float().unsqueeze(-1)) * loss_mask


def token_level_rewards(
    rewards: torch.Tensor, loss_mask: torch.Tensor, kl: torch.Tensor | None = None, kl_coef: float = 0.0
) -> torch.Tensor:
    """Place each sequence reward on its last trained token; subtract kl_coef * kl on every trained token.

    rewards: [B]; loss_mask: [B, R]; kl: [B, R] per-token KL estimate or None. Returns [B, R] float32.
    A sample with no trained token (e.g. masked out by overlong filtering) gets no reward anywhere.
    """
    length = loss_mask.shape[1]
    positions = torch.arange(length).expand_as(loss_mask)
    last = torch.where(loss_mask > 0, positions, -1).max(-1).values
    token_rewards = torch.zeros(loss_mask.shape)
    has_token = last >= 0
    token_rewards[has_token.nonzero().squeeze(-1), last[has_token]] = rewards.float()[has_token]
    if kl is not None and kl_coef:
        token_rewards = token_rewards - kl_coef * kl * loss_mask
    return token_rewards


SEQUENCE_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "rloo": rloo_advantages,
    "opo": opo_advantages,
    "gpg": gpg_advantages,
    "grpo_passk": grpo_passk_advantages,
}
ADVANTAGE_ESTIMATORS = (*SEQUENCE_ESTIMATORS, "gae", "reinforce_pp", "reinforce_pp_baseline", "remax")


def compute_advantages(
    estimator: str,
    rewards: torch.Tensor,
    token_rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    baseline_rewards: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    std_normalize: bool = True,
) -> AdvantageOutput:
    """Dispatch to the estimator `estimator`; [B, R] advantages, 0 where loss_mask is 0.

    rewards [B]: each sample's sequence reward (minus its summed KL when KL is in the reward), which the
    outcome estimators compare within groups. It is passed apart from token_rewards [B, R] because a
    sample masked out of the loss (e.g. truncated) has no token to carry its reward, yet its real score
    still belongs in its group's baseline. `values` [B, R] is required by gae, `baseline_rewards` [B]
    by remax.
    """
    loss_mask = loss_mask.float()
    if estimator == "gae":
        if values is None:
            raise ValueError("gae needs the critic's values")
        return gae_advantages(token_rewards, values, loss_mask, gamma, lam)
    if estimator == "reinforce_pp":
        return AdvantageOutput(reinforce_pp_advantages(token_rewards, loss_mask, gamma))
    if estimator == "reinforce_pp_baseline":
        return AdvantageOutput(reinforce_pp_baseline_advantages(rewards, loss_mask, group_ids))
    if estimator == "remax":
        if baseline_rewards is None:
            raise ValueError("remax needs the rewards of the greedy responses (baseline_rewards)")
        return AdvantageOutput(remax_advantages(token_rewards, loss_mask, baseline_rewards))
    if estimator == "opo":
        sequence = opo_advantages(rewards, group_ids, loss_mask.sum(-1))
    elif estimator == "rloo":
        sequence = rloo_advantages(rewards, group_ids)
    elif estimator in SEQUENCE_ESTIMATORS:
        sequence = SEQUENCE_ESTIMATORS[estimator](rewards, group_ids, std_normalize=std_normalize)
    else:
        raise ValueError(f"unknown advantage estimator {estimator!r}; available: {', '.join(ADVANTAGE_ESTIMATORS)}")
    return AdvantageOutput(sequence.unsqueeze(-1) * loss_mask)
