"""SFT batches, the SFT objective, and the saved Hugging Face directory."""

import torch
from transformers import AutoModelForCausalLM

from ascent.data.prompts import tokenize_records
from ascent.data.synthetic import arithmetic_records
from ascent.models.tokenizers import load_tokenizer
from ascent.trainer.sft import sft_batch


def test_sft_batch_trains_on_the_target_and_eos_only(tokenizer):
    records = tokenize_records(arithmetic_records(3, seed=0), tokenizer, max_prompt_tokens=200)
    batch = sft_batch(records, tokenizer, max_response_tokens=32)
    for row, record in enumerate(records):
        length = int(batch.loss_mask[row].sum())
        target = batch.response_ids[row, :length].tolist()
        assert tokenizer.decode(target[:-1]) == record.response
        assert target[-1] == tokenizer.eos_token_id
        assert batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist() == record.prompt_token_ids


def test_sft_objective_lowers_the_target_nll(make_policy, tokenizer):
    policy = make_policy("optim.lr=1e-2", "optim.micro_batch_size=4")
    records = tokenize_records(arithmetic_records(8, seed=1), tokenizer, max_prompt_tokens=200)
    batch = sft_batch(records, tokenizer, max_response_tokens=32)
    first = policy.update(batch, objective="sft")["nll"]
    for _ in range(10):
        last = policy.update(batch, objective="sft")["nll"]
    assert last < 0.7 * first


def test_saved_model_reloads_with_identical_logits_and_token_ids(make_policy, tokenizer, tmp_path):
    policy = make_policy()
    policy.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    reloaded_tokenizer = load_tokenizer(str(tmp_path))
    text = "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert reloaded_tokenizer(text, add_special_tokens=False)["input_ids"] == ids
    with torch.no_grad():
        expected = policy.model(torch.tensor([ids])).logits
        actual = reloaded(torch.tensor([ids])).logits
    torch.testing.assert_close(actual, expected)
