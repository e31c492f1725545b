"""Filters and reward shaping applied between scoring and advantages: pure functions.

DAPO (Yu et al. 2025, arXiv:2503.14476): dynamic sampling (section 3.2), overlong filtering and soft
overlong punishment (section 3.4). Skywork-OR1 (He et al. 2025, arXiv:2505.22312): drop-only group filtering.
"""

from __future__ import annotations

import torch


def informative_samples(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """[B] bool: True for the samples of groups whose rewards are not all equal. A group of one sample is
    never informative. rewards: [B] float; group_ids: [B] int64."""
    _, group = torch.unique(group_ids, return_inverse=True)
    num_groups = int(group.max()) + 1
    lowest = torch.full((num_groups,), float("inf")).scatter_reduce(0, group, rewards.float(), "amin")
    highest = torch.full((num_groups,), float("-inf")).scatter_reduce(0, group, rewards.float(), "amax")
    return (highest > lowest)[group]


def overlong_penalty(
    response_lengths: torch.Tensor, max_response_tokens: int, buffer_tokens: int, penalty: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment (arXiv:2503.14476, eq. 13), added to the reward:

        0                                        if L <= L_max - L_buffer
        -penalty * (L - (L_max - L_buffer)) / L_buffer   inside the buffer, reaching -penalty at L = L_max

    response_lengths: [B] tokens generated; L_max = max_response_tokens. Returns [B] float32 (<= 0).
    """
    if buffer_tokens <= 0:
        return torch.zeros(response_lengths.shape)
    excess = response_lengths.float() - (max_response_tokens - buffer_tokens)
    return -penalty * (excess / buffer_tokens).clamp(min=0, max=1)


def mask_truncated(loss_mask: torch.Tensor, finish_reasons: list[str]) -> torch.Tensor:
    """DAPO's overlong filtering: samples cut off at the length limit (finish reason "length") are
    excluded from the loss. Their reward says nothing about the answer they never finished.
    loss_mask: [B, R]. Returns a new [B, R] mask."""
    truncated = torch.tensor([reason == "length" for reason in finish_reasons])
    return loss_mask * (~truncated).unsqueeze(-1).to(loss_mask.dtype)
