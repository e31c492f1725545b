"""The value model of PPO: a causal LM's transformer body with a scalar head on every position."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ascent.models.builders import build_model
from ascent.models.logprobs import position_ids_from_mask


class ValueModel(torch.nn.Module):
    """V(prefix) for every prefix of the input: body hidden states [B, T, H] -> head -> [B, T]."""

    def __init__(self, body: PreTrainedModel, seed: int = 0) -> None:
        super().__init__()
        self.body = body
        hidden_size = body.config.hidden_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = torch.nn.Linear(hidden_size, 1, dtype=body.dtype)
            # A small head starts every value near 0, so the first advantages are close to the returns.
            torch.nn.init.normal_(self.head.weight, std=1 / (hidden_size + 1))
            torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        hidden = self.body(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        return self.head(hidden).squeeze(-1).float()

    def save(self, directory: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """The body as a Hugging Face directory (`AutoModel.from_pretrained` loads it) plus `value_head.safetensors`.
        `state_dict` (this module's keys) replaces the live tensors, e.g. the full weights gathered from shards."""
        state_dict = state_dict if state_dict is not None else self.state_dict()
        body = {name.removeprefix("body."): tensor for name, tensor in state_dict.items() if name.startswith("body.")}
        head = {name.removeprefix("head."): tensor for name, tensor in state_dict.items() if name.startswith("head.")}
        self.body.save_pretrained(directory, state_dict=body)
        head_file = str(Path(directory) / "value_head.safetensors")
        save_file({name: tensor.contiguous() for name, tensor in head.items()}, head_file)


def build_value_model(
    path: str,
    tokenizer: PreTrainedTokenizerBase,
    dtype: str = "float32",
    seed: int = 0,
    trust_remote_code: bool = False,
) -> ValueModel:
    """The body of the causal LM at `path` (or tiny preset, drawn from `seed` like the policy) and a fresh head."""
    causal_lm = build_model(path, tokenizer, dtype, seed, trust_remote_code)
    return ValueModel(causal_lm.base_model, seed=seed)


def response_values(
    model: ValueModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
) -> torch.Tensor:
    """V of the state before each response token: [B, R] float32, aligned like `response_logits`
    (position P + t - 1 sees the prompt and response tokens before t)."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    values = model(input_ids, attention_mask, position_ids_from_mask(attention_mask))
    response_length = response_ids.shape[1]
    return values[:, -response_length - 1 : -1]
