"""Tokenizers: the built-in character-level one (no download) and loading any Hugging Face tokenizer."""

from __future__ import annotations

import json
import string
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

# ChatML, the format of Qwen and many others. `generation` marks what the assistant wrote.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Classes whose saved `tokenizer.json` fully defines the tokenizer. AutoTokenizer would swap in the
# model family's class (e.g. Qwen2Tokenizer), re-imposing that family's pre-tokenizer and changing ids.
_GENERIC_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character plus ChatML specials: digits stay separate tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN]
    characters = [c for c in string.printable if c not in "\x0b\x0c\r"]
    vocab = {token: index for index, token in enumerate(specials + characters)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=PAD_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer.add_special_tokens(specials)
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=PAD_TOKEN,
        padding_side="left",  # passed here because setting it later is not saved
        chat_template=CHATML_TEMPLATE,
    )


def load_tokenizer(path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """Load a tokenizer for `path` (a model directory or a `tiny:` preset), left-padded, with a pad token."""
    if path.startswith("tiny:"):
        return build_char_tokenizer()
    config_file = Path(path) / "tokenizer_config.json"
    saved_class = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.is_file() else None
    if saved_class in _GENERIC_CLASSES:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    else:
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
