"""Micro-batched logprob recomputation shared by the policy and reference workers."""

from __future__ import annotations

import torch

from ascent.models.logprobs import entropy_from_logits, response_logits, token_logprobs
from ascent.rollout.trajectories import Trajectories


@torch.no_grad()
def compute_response_logprobs(
    model: torch.nn.Module,
    batch: Trajectories,
    micro_batch_size: int,
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(response token) under `model` at `temperature`: [B, R] float32 on CPU, 0 on padding.
    Micro-batches compute on `device` (where the worker computes, even when FSDP keeps shards in CPU
    memory). With `with_entropy`, also the per-token entropy [B, R]."""
    logprob_parts, entropy_parts = [], []
    for micro in batch.split(micro_batch_size):
        micro = micro.to(device)
        logits = response_logits(model, micro.prompt_ids, micro.prompt_mask, micro.response_ids, micro.response_mask)
        logprob_parts.append((token_logprobs(logits, micro.response_ids, temperature) * micro.response_mask).cpu())
        if with_entropy:
            entropy_parts.append((entropy_from_logits(logits, temperature) * micro.response_mask).cpu())
    entropy = torch.cat(entropy_parts) if with_entropy else None
    return torch.cat(logprob_parts), entropy
