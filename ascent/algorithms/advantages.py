"""Advantage estimators: pure functions of rewards and group ids."""

from __future__ import annotations

from collections.abc import Callable

import torch


def grpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO outcome advantage (Shao et al. 2024, arXiv:2402.03300, section 4.1.2).

    A_i = (r_i - mean_g(r)) / (std_g(r) + eps), over the samples i of group g (one prompt's samples).
    std is the unbiased (n - 1) sample std. `std_normalize=False` gives Dr.GRPO's A_i = r_i - mean_g(r)
    (Liu et al. 2025, arXiv:2503.20783).

    Groups of size one get advantage 0: with no other sample there is no baseline to compare against.
    Groups whose rewards are all equal get advantage 0 (no signal), with either setting.

    rewards: [B] float; group_ids: [B] int64 (any values; equal id = same group). Returns [B] float32.
    """
    rewards = rewards.float()
    _, group = torch.unique(group_ids, return_inverse=True)
    num_groups = int(group.max()) + 1
    counts = torch.zeros(num_groups).index_add_(0, group, torch.ones_like(rewards))
    means = torch.zeros(num_groups).index_add_(0, group, rewards) / counts
    centred = rewards - means[group]
    if std_normalize:
        squares = torch.zeros(num_groups).index_add_(0, group, centred**2)
        stds = (squares / (counts - 1).clamp(min=1)).sqrt()
        centred = centred / (stds[group] + eps)
    return torch.where(counts[group] > 1, centred, torch.zeros_like(centred))


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {"grpo": grpo_advantages}


def compute_advantages(
    name: str, rewards: torch.Tensor, group_ids: torch.Tensor, loss_mask: torch.Tensor, std_normalize: bool = True
) -> torch.Tensor:
    """Per-token advantages [B, R]: the sequence advantage broadcast over tokens with loss_mask 1."""
    sequence_advantages = ADVANTAGE_ESTIMATORS[name](rewards, group_ids, std_normalize=std_normalize)
    return sequence_advantages.unsqueeze(-1) * loss_mask
