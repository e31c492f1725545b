"""A compact forward of Llama-family decoders (Llama, Mistral, Qwen2, Qwen3) for generation.

It reads the Hugging Face model's own parameters (nothing is copied, so an optimizer step on the policy is
seen at once) and keeps keys and values in a cache preallocated for the whole generation, written in place.
Against the model's own forward it saves, per decoding step: the attention-mask construction, the cache's
concatenations (each step copies the whole cache), and the per-module bookkeeping of `generate`.

Layout: rows are left-padded, so every row writes its step-t key and value into the same cache column;
each row's rotary position is its column minus its left padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")


@dataclass
class KVCache:
    """Keys and values of every layer, [rows, kv_heads, columns, head_dim] each, and the key mask [rows, columns]
    (True where the column holds a real token of the row). `length` columns are filled."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_mask: torch.Tensor
    length: int

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (ascending indices), moved to the front in place: only the filled columns are copied,
        and the memory is reused."""
        count, filled = len(rows), self.length
        for tensors in (self.keys, self.values):
            for index, tensor in enumerate(tensors):
                tensor[:count, :, :filled] = tensor[rows, :, :filled]
                tensors[index] = tensor[:count]
        self.key_mask[:count] = self.key_mask[rows]
        self.key_mask = self.key_mask[:count]


class LlamaDecoder:
    """Prefill and decode over `model`'s parameters. Build one per `generate` call or keep it: it holds no state
    besides references to the model's modules."""

    def __init__(self, model: PreTrainedModel) -> None:
        model_type = getattr(model.config, "model_type", None)
        if model_type not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"rollout.engine=native supports {', '.join(SUPPORTED_ARCHITECTURES)} models, not {model_type!r}; "
                "use rollout.engine=hf."
            )
        config = model.config
        self.model = model
        self.layers = model.model.layers
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = self.layers[0].self_attn.head_dim
        self.scaling = self.layers[0].self_attn.scaling
        mistral_window = getattr(config, "sliding_window", None) if model_type == "mistral" else None
        self.windows = [getattr(layer.self_attn, "sliding_window", None) or mistral_window for layer in self.layers]

    def parameters_device_dtype(self) -> tuple[torch.device, torch.dtype]:
        weight = self.model.model.embed_tokens.weight
        return weight.device, weight.dtype

    def rotary_tables(self, max_position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [max_position, head_dim] from the model's own rotary module (its scaling variants
        included)."""
        device, dtype = self.parameters_device_dtype()
        positions = torch.arange(max_position, device=device)[None]
        probe = torch.empty(1, dtype=dtype, device=device)
        cos, sin = self.model.model.rotary_emb(probe, positions)
        return cos[0], sin[0]

    def new_cache(self, rows: int, columns: int) -> KVCache:
        device, dtype = self.parameters_device_dtype()
        shape = (rows, self.num_kv_heads, columns, self.head_dim)
        return KVCache(
            keys=[torch.empty(shape, device=device, dtype=dtype) for _ in self.layers],
            values=[torch.empty(shape, device=device, dtype=dtype) for _ in self.layers],
            key_mask=torch.zeros(rows, columns, dtype=torch.bool, device=device),
            length=0,
        )

    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """Left-padded prompts [B, P]: logits of the last position [B, V] (float32), and every layer's keys and
        values [B, kv_heads, P, head_dim]."""
        width = input_ids.shape[1]
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        real = attention_mask.bool()
        column = torch.arange(width, device=input_ids.device)
        causal = column[None, :] <= column[:, None]  # [query, key]
        keys_out, values_out = [], []

        def attend(layer_index, query, key, value):
            keys_out.append(key)
            values_out.append(value)
            allowed = causal
            if self.windows[layer_index]:
                allowed = allowed & (column[None, :] > column[:, None] - self.windows[layer_index])
            # a padding query may attend to itself only, so that no row of the softmax is empty
            mask = (allowed[None] & real[:, None, :]) | torch.eye(width, dtype=torch.bool, device=real.device)[None]
            return F.scaled_dot_product_attention(
                query, key, value, attn_mask=mask[:, None], scale=self.scaling, enable_gqa=True
            )

        hidden = self._run_layers(input_ids, positions, rotary, attend)
        return self._logits(hidden[:, -1]), keys_out, values_out

    def decode(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache, rotary: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        """One token per row [B] at rotary `positions` [B], written into cache column `cache.length`: the next
        logits [B, V] (float32)."""
        column = cache.length
        cache.key_mask[:, column] = True

        def attend(layer_index, query, key, value):
            cache.keys[layer_index][:, :, column] = key[:, :, 0]
            cache.values[layer_index][:, :, column] = value[:, :, 0]
            window = self.windows[layer_index]
            start = max(0, column + 1 - window) if window else 0
            keys = cache.keys[layer_index][:, :, start : column + 1]
            values = cache.values[layer_index][:, :, start : column + 1]
            mask = cache.key_mask[:, None, None, start : column + 1]
            return F.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, scale=self.scaling, enable_gqa=True
            )

        hidden = self._run_layers(tokens[:, None], positions[:, None], rotary, attend)
        cache.length += 1
        return self._logits(hidden[:, -1])

    def _run_layers(self, input_ids, positions, rotary, attend) -> torch.Tensor:
        cos, sin = rotary[0][positions][:, None], rotary[1][positions][:, None]  # [B, 1, T, head_dim]
        hidden = self.model.model.embed_tokens(input_ids)
        rows, width = input_ids.shape
        for index, layer in enumerate(self.layers):
            attention = layer.self_attn
            normed = layer.input_layernorm(hidden)
            query = F.linear(normed, attention.q_proj.weight, attention.q_proj.bias).view(
                rows, width, -1, self.head_dim
            )
            key = F.linear(normed, attention.k_proj.weight, attention.k_proj.bias).view(rows, width, -1, self.head_dim)
            value = F.linear(normed, attention.v_proj.weight, attention.v_proj.bias).view(
                rows, width, -1, self.head_dim
            )
            if hasattr(attention, "q_norm"):  # Qwen3 normalises each head's query and key
                query, key = attention.q_norm(query), attention.k_norm(key)
            query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
            query, key = _rotate(query, cos, sin), _rotate(key, cos, sin)
            attended = attend(index, query, key, value).transpose(1, 2).reshape(rows, width, -1)
            hidden = hidden + F.linear(attended, attention.o_proj.weight, attention.o_proj.bias)
            mlp = layer.mlp
            normed = layer.post_attention_layernorm(hidden)
            gate = mlp.act_fn(F.linear(normed, mlp.gate_proj.weight, mlp.gate_proj.bias))
            up = F.linear(normed, mlp.up_proj.weight, mlp.up_proj.bias)
            hidden = hidden + F.linear(gate * up, mlp.down_proj.weight, mlp.down_proj.bias)
        return self.model.model.norm(hidden)

    def _logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        head = self.model.lm_head
        return F.linear(last_hidden, head.weight, head.bias).float()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [B, heads, T, head_dim] (the half-split convention of the Llama family)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
