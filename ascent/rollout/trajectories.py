"""`Trajectories`: the batch that flows through a training step, from rollout to update."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch


@dataclass
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0  # 0 = off
    stop: tuple[str, ...] = ()  # a response ends at the token that completes one of these strings
    samples_per_prompt: int = 1
    seed: int = 0


@dataclass
class Trajectories:
    """Sampled responses as token ids (never re-tokenized text), one row per sample.

    Prompts are left-padded to P tokens and responses right-padded to R tokens, so that
    `cat([prompt_ids, response_ids], 1)` is the model input. Masks are 1 on real tokens.
    The rollout engine fills the first block; later stages of the step fill the optional ones.
    """

    prompt_ids: torch.Tensor  # [B, P] int64
    prompt_mask: torch.Tensor  # [B, P] int64, 1 = prompt token, 0 = left padding
    response_ids: torch.Tensor  # [B, R] int64, EOS included when the sample stopped
    response_mask: torch.Tensor  # [B, R] int64, 1 = token the model produced, 0 = right padding
    loss_mask: torch.Tensor  # [B, R] float32, 1 = token is trained on (0: padding, tool/environment output)
    rollout_logprobs: torch.Tensor  # [B, R] float32, the engine's log p(token) at its sampling temperature
    group_ids: torch.Tensor  # [B] int64, samples of the same prompt share a group id
    finish_reasons: list[str]  # "stop" (EOS) or "length" (hit max_tokens), one per sample
    policy_version: int = 0  # version of the weights that sampled this batch

    rewards: torch.Tensor | None = None  # [B] float32, sequence-level score
    advantages: torch.Tensor | None = None  # [B, R] float32
    old_logprobs: torch.Tensor | None = None  # [B, R] float32, policy before this step's updates
    ref_logprobs: torch.Tensor | None = None  # [B, R] float32, reference model
    values: torch.Tensor | None = None  # [B, R] float32, the critic's value before each response token
    returns: torch.Tensor | None = None  # [B, R] float32, the critic's regression target

    def __len__(self) -> int:
        return self.prompt_ids.shape[0]

    @property
    def response_lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)

    def select(self, indices: torch.Tensor | list[int]) -> Trajectories:
        """The rows at `indices`, in that order."""
        index = torch.as_tensor(indices, dtype=torch.long)
        rows = index.tolist()
        changes = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                changes[f.name] = value[index.to(value.device)]
            elif f.name == "finish_reasons":
                changes[f.name] = [value[i] for i in rows]
        return dataclasses.replace(self, **changes)

    def split(self, size: int) -> list[Trajectories]:
        """Consecutive chunks of `size` rows (the last may be shorter)."""
        return [self.select(list(range(start, min(start + size, len(self))))) for start in range(0, len(self), size)]

    def to(self, device: torch.device | str) -> Trajectories:
        changes = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, **changes)


def concat_trajectories(batches: list[Trajectories]) -> Trajectories:
    """Stack batches row-wise, re-padding prompts (left) and responses (right) to the longest.
    Padding ids are 0: positions with mask 0 are never attended to or trained on. Only the rollout fields
    and rewards are carried; group ids are kept as they are (make them distinct first)."""
    if len(batches) == 1:
        return batches[0]
    prompt_width = max(batch.prompt_ids.shape[1] for batch in batches)
    response_width = max(batch.response_ids.shape[1] for batch in batches)

    def pad(tensor: torch.Tensor, width: int, left: bool) -> torch.Tensor:
        missing = width - tensor.shape[1]
        return torch.nn.functional.pad(tensor, (missing, 0) if left else (0, missing))

    return Trajectories(
        prompt_ids=torch.cat([pad(b.prompt_ids, prompt_width, True) for b in batches]),
        prompt_mask=torch.cat([pad(b.prompt_mask, prompt_width, True) for b in batches]),
        response_ids=torch.cat([pad(b.response_ids, response_width, False) for b in batches]),
        response_mask=torch.cat([pad(b.response_mask, response_width, False) for b in batches]),
        loss_mask=torch.cat([pad(b.loss_mask, response_width, False) for b in batches]),
        rollout_logprobs=torch.cat([pad(b.rollout_logprobs, response_width, False) for b in batches]),
        group_ids=torch.cat([b.group_ids for b in batches]),
        finish_reasons=[reason for b in batches for reason in b.finish_reasons],
        policy_version=batches[0].policy_version,
        rewards=torch.cat([b.rewards for b in batches]) if all(b.rewards is not None for b in batches) else None,
    )


def left_pad(sequences: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> (ids [B, P], mask [B, P]) left-padded to the longest."""
    length = max(len(sequence) for sequence in sequences)
    ids = torch.full((len(sequences), length), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        if sequence:
            ids[row, length - len(sequence) :] = torch.tensor(sequence, dtype=torch.long)
            mask[row, length - len(sequence) :] = 1
    return ids, mask


def right_pad(sequences: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> (ids [B, R], mask [B, R]) right-padded to the longest (at least 1 column)."""
    length = max(1, max(len(sequence) for sequence in sequences))
    ids = torch.full((len(sequences), length), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        mask[row, : len(sequence)] = 1
    return ids, mask
