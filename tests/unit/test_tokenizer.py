"""The built-in character tokenizer, and reloading it from a saved model directory."""

import json
import string

import pytest

from ascent.models.builders import build_model
from ascent.models.tokenizers import (
    BOS_TOKEN,
    CHATML_TEMPLATE,
    EOS_TOKEN,
    PAD_TOKEN,
    build_char_tokenizer,
    load_tokenizer,
)

TEXTS = [
    "What is 12 + 7? Answer in \\boxed{}.",
    "line one\nline two\twith a tab",
    "  leading and trailing spaces  ",
    "<|im_start|>user\nhi<|im_end|>\n",
    string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", ""),
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_one_token_per_character_and_digits_stay_separate(tokenizer):
    text = "x = 12345 - 678"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tokenizer.convert_ids_to_tokens(ids) == list(text)
    digits = tokenizer("0123456789", add_special_tokens=False)["input_ids"]
    assert len(set(digits)) == 10


def test_specials_padding_and_chat_template(tokenizer):
    assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN]
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 2)
    assert tokenizer("<|im_end|>", add_special_tokens=False)["input_ids"] == [2]  # one token, not ten
    assert len(tokenizer) == 3 + len(string.printable) - 3  # specials + printable ASCII minus \x0b \x0c \r
    assert tokenizer.padding_side == "left"
    assert tokenizer.chat_template == CHATML_TEMPLATE

    batch = tokenizer(["ab", "abcd"], padding=True, add_special_tokens=False)
    assert batch["input_ids"][0][:2] == [0, 0]  # padded on the left, for generation
    assert batch["attention_mask"] == [[0, 0, 1, 1], [1, 1, 1, 1]]


def test_saved_next_to_a_tiny_qwen2_reloads_identically(tmp_path, tokenizer):
    model = build_model("tiny:qwen2", tokenizer)
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tokenizer)
    tokenizer.save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "config.json").is_file() and (tmp_path / "tokenizer.json").is_file()
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "qwen2"

    reloaded = load_tokenizer(str(tmp_path))
    for text in TEXTS:
        assert (
            reloaded(text, add_special_tokens=False)["input_ids"]
            == tokenizer(text, add_special_tokens=False)["input_ids"]
        )
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    assert reloaded.apply_chat_template(messages, add_generation_prompt=True) == tokenizer.apply_chat_template(
        messages, add_generation_prompt=True
    )
    assert reloaded.padding_side == "left"
    assert (reloaded.pad_token_id, reloaded.eos_token_id) == (tokenizer.pad_token_id, tokenizer.eos_token_id)
    assert len(reloaded) == len(tokenizer)


def test_tiny_preset_path_gives_the_char_tokenizer(tokenizer):
    loaded = load_tokenizer("tiny:llama")
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert loaded.padding_side == "left"
