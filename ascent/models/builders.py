"""Build the trainable causal LM: a Hugging Face checkpoint or a tiny preset with random weights."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedModel, PreTrainedTokenizerBase, Qwen2Config

from ascent.config.schema import ModelConfig
from ascent.models.presets import TINY_PRESETS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_ARCHITECTURES = {"llama": LlamaConfig, "qwen2": Qwen2Config}


def build_model(
    path: str,
    tokenizer: PreTrainedTokenizerBase,
    dtype: str = "float32",
    seed: int = 0,
    trust_remote_code: bool = False,
) -> PreTrainedModel:
    """A `tiny:<preset>` is built from its config with weights drawn from `seed`; anything else is loaded."""
    if path.startswith("tiny:"):
        preset = dict(TINY_PRESETS[path[5:]])
        config_class = _ARCHITECTURES[preset.pop("architecture")]
        config = config_class(
            vocab_size=len(tokenizer),
            tie_word_embeddings=True,
            max_position_embeddings=2048,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.bos_token_id,
            **preset,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        return model
    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)


def build_model_from_config(config: ModelConfig, tokenizer: PreTrainedTokenizerBase, seed: int) -> PreTrainedModel:
    return build_model(config.path, tokenizer, config.dtype, seed, config.trust_remote_code)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
