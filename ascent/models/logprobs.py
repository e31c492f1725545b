"""Per-token log-probabilities and entropy of a causal LM's response tokens."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature)[token]: logits [B, T, V] any float dtype, token_ids [B, T] int64.

    Returns [B, T] float32. Computed in fp32 as gather - logsumexp, without materialising log_softmax.
    """
    scaled = logits.float() / temperature
    picked = scaled.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) per position: logits [B, T, V] -> [B, T] float32."""
    scaled = logits.float() / temperature
    log_probs = torch.log_softmax(scaled, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that start at 0 on the first real token of each left-padded row: [B, T] int64."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def response_logits(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
) -> torch.Tensor:
    """Logits that predict each response token: [B, R, V].

    prompt_ids/prompt_mask [B, P] are left-padded (mask 1 = real token); response_ids/response_mask
    [B, R] are right-padded. Only the last R + 1 positions are projected onto the vocabulary.
    """
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    response_length = response_ids.shape[1]
    output = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        logits_to_keep=response_length + 1,
        use_cache=False,
    )
    return output.logits[:, :-1]
