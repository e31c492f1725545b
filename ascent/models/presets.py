"""Tiny model presets built from a config with random weights: for tests, CI and the CPU demo.

Kept free of torch imports so config validation can check preset names instantly.
"""

# Llama is the default architecture: `AutoTokenizer` reloads a saved Llama checkpoint with the tokenizer
# it was saved with, while for `qwen2` it imposes Qwen2's pre-tokenizer and changes the ids (the loader in
# `ascent.models.tokenizers` works around that, but a checkpoint others load with AutoTokenizer should not
# depend on it).
TINY_PRESETS: dict[str, dict] = {
    "llama": dict(
        architecture="llama",
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
    ),
    "llama-micro": dict(
        architecture="llama",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=128,
    ),
    "llama-25m": dict(  # about 24M parameters: a benchmark model where the forward, not Python, dominates
        architecture="llama",
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=1408,
    ),
    "qwen2": dict(
        architecture="qwen2",
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
    ),
}
