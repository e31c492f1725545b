"""Where responses end: the first EOS token, or the token that completes a stop string."""

import torch

from ascent.models.tokenizers import build_char_tokenizer
from ascent.rollout.stopping import StopStrings, response_ends

TOKENIZER = build_char_tokenizer()


def ids(text: str) -> list[int]:
    return TOKENIZER(text, add_special_tokens=False)["input_ids"]


def test_a_response_ends_at_its_first_eos_or_at_the_length_limit():
    eos = TOKENIZER.eos_token_id
    generated = torch.tensor([[*ids("12"), eos, *ids("34")], ids("12345"), [eos, *ids("1234")]])
    assert response_ends(generated, [eos], None) == [(3, "stop"), (5, "length"), (1, "stop")]


def test_a_stop_string_ends_the_response_at_the_token_that_completes_it():
    stops = StopStrings(TOKENIZER, ["</answer>", "\n\n"])
    eos = TOKENIZER.eos_token_id
    texts = ["<answer>42</answer> and more", "first\n\nsecond", "no stop here at all", "4</answer"]
    width = max(len(ids(text)) for text in texts)
    generated = torch.tensor([ids(text) + [eos] * (width - len(ids(text))) for text in texts])
    ends = response_ends(generated, [eos], stops)
    assert ends[0] == (len(ids("<answer>42</answer>")), "stop")
    assert ends[1] == (len(ids("first\n\n")), "stop")
    assert ends[2] == (len(ids("no stop here at all")) + 1, "stop")  # its EOS
    assert ends[3] == (len(ids("4</answer")) + 1, "stop")  # an incomplete stop string does not end it
    assert TOKENIZER.decode(generated[0, : ends[0][0]]).endswith("</answer>")


def test_an_eos_before_the_stop_string_wins():
    stops = StopStrings(TOKENIZER, ["END"])
    eos = TOKENIZER.eos_token_id
    generated = torch.tensor([[*ids("ab"), eos, *ids("END")]])
    assert response_ends(generated, [eos], stops) == [(3, "stop")]


def test_only_tokens_that_contain_a_stop_strings_last_character_are_decoded():
    stops = StopStrings(TOKENIZER, ["xyz"])
    flags = stops.could_complete(torch.tensor(ids("axyzb")))
    assert flags.tolist() == [False, False, False, True, False]
    assert stops.could_complete(torch.tensor([len(TOKENIZER) + 5])).tolist() == [True]  # beyond the vocabulary
