"""Reading prompt rows (verl and simple layouts), precise data errors, tokenizing, sampling, splitting."""

import json
import logging
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ascent.config.schema import DataConfig, SyntheticTaskConfig
from ascent.data.datasets import load_prompt_datasets
from ascent.data.prompts import load_prompt_template, render_prompt, tokenize_records
from ascent.data.records import DataError, PromptRecord, read_records
from ascent.data.sampler import PromptSampler
from ascent.data.synthetic import ARITHMETIC_SOURCE, arithmetic_records
from ascent.models.tokenizers import build_char_tokenizer
from ascent.rewards.arithmetic import compute_score

# With the character tokenizer and ChatML, one user message of n characters is n + 19 tokens:
# <|im_start|> "user\n" <content> <|im_end|> "\n" <|im_start|> "assistant\n"  ->  1 + 5 + n + 1 + 1 + 1 + 10
CHATML_OVERHEAD = 19

VERL_ROWS = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1 + 1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"split": "train", "index": 0},
    },
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "What is 2 + 3?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "5"},
        "extra_info": {"split": "train", "index": 1},
    },
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_rows(tmp_path, suffix, rows):
    path = tmp_path / f"data{suffix}"
    return write_parquet(path, rows) if suffix == ".parquet" else write_jsonl(path, rows)


def data_error(path) -> str:
    with pytest.raises(DataError) as info:
        read_records(path)
    return str(info.value)


# ---- reading both layouts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_reads_verl_layout(tmp_path, suffix):
    records = read_records(write_rows(tmp_path, suffix, VERL_ROWS))
    assert len(records) == 2
    first, second = records
    assert first.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 1 + 1?"},
    ]
    assert (first.ground_truth, second.ground_truth) == ("2", "5")
    assert first.data_source == second.data_source == "openai/gsm8k"
    assert first.extra_info == {"split": "train", "index": 0}
    assert second.extra_info == {"split": "train", "index": 1}
    assert first.response is None and first.prompt_token_ids == []


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_reads_simple_layout(tmp_path, suffix):
    rows = [
        {"prompt": "What is 4 + 4?", "answer": "8", "response": "\\boxed{8}"},
        {"prompt": "What is 9 - 2?", "answer": "7", "response": "\\boxed{7}"},
    ]
    records = read_records(write_rows(tmp_path, suffix, rows))
    assert [r.messages for r in records] == [
        [{"role": "user", "content": "What is 4 + 4?"}],
        [{"role": "user", "content": "What is 9 - 2?"}],
    ]
    assert [r.ground_truth for r in records] == ["8", "7"]
    assert [r.response for r in records] == ["\\boxed{8}", "\\boxed{7}"]
    assert {r.data_source for r in records} == {"custom"}  # the default when the column is absent
    assert records[0].extra_info == {}


def test_reads_json_array_file_and_skips_blank_jsonl_lines(tmp_path):
    array = tmp_path / "rows.json"
    array.write_text(json.dumps([{"prompt": "a", "answer": 1}, {"prompt": "b", "answer": 2}]))
    assert [r.ground_truth for r in read_records(array)] == [1, 2]
    lines = tmp_path / "rows.jsonl"
    lines.write_text('{"prompt": "a", "answer": 1}\n\n   \n{"prompt": "b", "answer": 2}\n')
    assert [r.messages[0]["content"] for r in read_records(lines)] == ["a", "b"]


# ---- precise errors -----------------------------------------------------------------------------------------

GOOD_ROW = {"prompt": "What is 1 + 1?", "answer": "2"}


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.parquet"
    message = data_error(missing)
    assert str(missing) in message and "does not exist" in message


def test_missing_prompt_column_names_file_row_and_column(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD_ROW, {"question": "x", "answer": "1"}])
    message = data_error(path)
    assert f"{path} row 1" in message
    assert "missing column 'prompt'" in message
    assert "columns found: answer, question" in message


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_prompt_of_wrong_type_names_file_row_and_column(tmp_path, suffix):
    path = write_rows(tmp_path, suffix, [{"prompt": 7, "answer": "1"}])
    message = data_error(path)
    assert f"{path} row 0, column 'prompt'" in message
    assert "got int 7" in message


def test_prompt_of_wrong_type_in_a_later_row(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD_ROW, GOOD_ROW, {"prompt": 7, "answer": "1"}])
    assert f"{path} row 2, column 'prompt'" in data_error(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_message_without_content_names_file_row_column_and_turn(tmp_path, suffix):
    bad = {**VERL_ROWS[1], "prompt": [{"role": "system", "content": "hi"}, {"role": "user"}]}
    path = write_rows(tmp_path, suffix, [VERL_ROWS[0], bad])
    message = data_error(path)
    assert f"{path} row 1, column 'prompt'" in message
    assert "message 1 has no string 'content'" in message


def test_message_without_role_and_empty_message_list(tmp_path):
    no_role = write_jsonl(tmp_path / "a.jsonl", [{"prompt": [{"content": "hi"}], "answer": "1"}])
    assert "row 0, column 'prompt': message 0 has no string 'role'" in data_error(no_role)
    empty = write_jsonl(tmp_path / "b.jsonl", [{"prompt": [], "answer": "1"}])
    assert "row 0, column 'prompt': expected a string or a non-empty list" in data_error(empty)


def test_missing_answer_names_file_row_and_both_columns(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [GOOD_ROW, {"prompt": "What is 2 + 2?"}])
    message = data_error(path)
    assert f"{path} row 1" in message
    assert "'answer'" in message and "'reward_model.ground_truth'" in message
    assert "columns found: prompt" in message


def test_reward_model_without_ground_truth_names_file_row_and_column(tmp_path):
    bad = {**VERL_ROWS[1], "reward_model": {"style": "rule"}}
    path = write_jsonl(tmp_path / "d.jsonl", [VERL_ROWS[0], bad])
    message = data_error(path)
    assert f"{path} row 1, column 'reward_model'" in message and "'ground_truth'" in message


def test_parquet_row_without_ground_truth_is_an_error(tmp_path):
    bad = {**VERL_ROWS[1], "reward_model": {"style": "rule"}}
    path = write_parquet(tmp_path / "d.parquet", [VERL_ROWS[0], bad])
    assert "row 1" in data_error(path)


def test_invalid_json_line_names_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(GOOD_ROW) + "\n\n{not json\n")
    message = data_error(path)
    assert f"{path} line 3: invalid JSON" in message


def test_json_row_that_is_not_an_object(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([GOOD_ROW, ["a", "list"]]))
    assert f"{path} row 1: expected a JSON object, got list" in data_error(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_empty_file_is_an_error(tmp_path, suffix):
    path = tmp_path / f"empty{suffix}"
    if suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist([GOOD_ROW]).slice(0, 0), path)
    else:
        path.write_text("\n")
    message = data_error(path)
    assert str(path) in message and "empty" in message


def test_unsupported_suffix_is_an_error(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("prompt,answer\nx,1\n")
    message = data_error(path)
    assert str(path) in message and "'.csv'" in message and ".parquet" in message


def test_corrupt_parquet_is_a_data_error(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"not a parquet file")
    assert f"{path}: cannot read as Parquet" in data_error(path)


# ---- tokenizing ---------------------------------------------------------------------------------------------


def user_record(content: str, **kwargs) -> PromptRecord:
    return PromptRecord(messages=[{"role": "user", "content": content}], ground_truth="0", data_source="t", **kwargs)


def test_tokenize_records_drops_prompts_over_the_limit(tokenizer, caplog):
    records = [user_record("a"), user_record("abcde"), user_record("abcdefghijk")]  # 20, 24, 30 tokens
    with caplog.at_level(logging.WARNING, logger="ascent.data.prompts"):
        kept = tokenize_records(records, tokenizer, max_prompt_tokens=24)
    assert [r.messages[0]["content"] for r in kept] == ["a", "abcde"]
    assert [len(r.prompt_token_ids) for r in kept] == [1 + CHATML_OVERHEAD, 5 + CHATML_OVERHEAD]
    assert tokenizer.decode(kept[0].prompt_token_ids) == "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n"
    assert "dropped 1 of 3 prompts" in caplog.text


def test_tokenize_records_without_chat_template_counts_characters(tokenizer):
    kept = tokenize_records([user_record("abcde"), user_record("abcdefg")], tokenizer, 6, apply_chat_template=False)
    assert [len(r.prompt_token_ids) for r in kept] == [5]


def test_tokenize_records_raises_when_all_prompts_are_too_long(tokenizer):
    with pytest.raises(DataError, match=r"all 2 prompts are longer than data.max_prompt_tokens=10"):
        tokenize_records([user_record("a"), user_record("b")], tokenizer, max_prompt_tokens=10, split="val")


def test_prompt_template_rewrites_the_last_user_message(tmp_path, tokenizer):
    template_file = tmp_path / "prompt.jinja"
    template_file.write_text("Q: {{ prompt }} [{{ data_source }}/{{ extra_info.level }}]")
    template = load_prompt_template(str(template_file))
    record = PromptRecord(
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "2+2?"}],
        ground_truth="4",
        data_source="src",
        extra_info={"level": 3},
    )
    rewritten = "Q: 2+2? [src/3]"
    expected = f"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n{rewritten}<|im_end|>\n<|im_start|>assistant\n"
    assert render_prompt(record, tokenizer, template) == expected
    assert render_prompt(record, tokenizer, template, apply_chat_template=False) == f"S\n{rewritten}"

    (kept,) = tokenize_records([record], tokenizer, max_prompt_tokens=100, template=template)
    assert tokenizer.decode(kept.prompt_token_ids) == expected
    system_tokens = 1 + len("system\n") + 1 + 1 + 1  # <|im_start|> system\n S <|im_end|> \n
    assert len(kept.prompt_token_ids) == system_tokens + len(rewritten) + CHATML_OVERHEAD
    assert record.messages[1]["content"] == "2+2?"  # the record itself is not rewritten


def test_missing_prompt_template_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match=r"data\.prompt_template"):
        load_prompt_template(str(tmp_path / "missing.jinja"))
    assert load_prompt_template(None) is None


# ---- sampler ------------------------------------------------------------------------------------------------


def test_sampler_same_seed_same_order_other_seed_other_order():
    assert PromptSampler(50, seed=3).next_indices(120) == PromptSampler(50, seed=3).next_indices(120)
    assert PromptSampler(50, seed=3).next_indices(50) != PromptSampler(50, seed=4).next_indices(50)


def test_sampler_epochs_are_distinct_permutations():
    sampler = PromptSampler(20, seed=0)
    epochs = [sampler.next_indices(20) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(20))  # every index exactly once per epoch
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and epochs[0] != epochs[2]
    assert sampler.epoch == 2 and sampler.position == 20

    crossing = PromptSampler(20, seed=0).next_indices(27)  # runs on into epoch 1
    assert crossing == epochs[0] + epochs[1][:7]


def test_sampler_without_shuffle_is_sequential():
    assert PromptSampler(4, shuffle=False).next_indices(10) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]


@pytest.mark.parametrize("consumed", [0, 7, 20, 33])
def test_sampler_state_dict_resumes_the_exact_sequence(consumed):
    sampler = PromptSampler(20, seed=11)
    sampler.next_indices(consumed)
    state = sampler.state_dict()
    expected = sampler.next_indices(45)

    resumed = PromptSampler(20, seed=999)  # the seed comes from the state
    resumed.load_state_dict(state)
    assert resumed.next_indices(45) == expected


def test_sampler_needs_records():
    with pytest.raises(ValueError, match="at least one record"):
        PromptSampler(0)


# ---- synthetic task and datasets ----------------------------------------------------------------------------

QUESTION = re.compile(r"What is (\d+) ([+-]) (\d+)\? Answer in \\boxed\{\}\.")


def test_arithmetic_records_are_deterministic_per_seed():
    first, again, other = arithmetic_records(30, seed=5), arithmetic_records(30, seed=5), arithmetic_records(30, 6)
    assert [r.messages for r in first] == [r.messages for r in again]
    assert [r.ground_truth for r in first] == [r.ground_truth for r in again]
    assert [r.messages for r in first] != [r.messages for r in other]


def test_arithmetic_records_are_consistent():
    records = arithmetic_records(200, seed=0, min_digits=2, max_digits=2)
    operations = set()
    for record in records:
        (message,) = record.messages
        a, operation, b = QUESTION.fullmatch(message["content"]).groups()
        a, b = int(a), int(b)
        operations.add(operation)
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert int(record.ground_truth) == (a + b if operation == "+" else a - b)
        assert record.response == f"\\boxed{{{record.ground_truth}}}"
        assert record.data_source == ARITHMETIC_SOURCE
        assert compute_score(record.data_source, record.response, record.ground_truth)["score"] == 1.0
    assert operations == {"+", "-"}
    assert any(int(r.ground_truth) < 0 for r in records)


def test_load_prompt_datasets_val_fraction_splits_disjointly(tmp_path, tokenizer):
    rows = [{"prompt": f"question {i}", "answer": str(i)} for i in range(20)]
    config = DataConfig(train_files=[str(write_jsonl(tmp_path / "d.jsonl", rows))], val_fraction=0.25, seed=0)
    datasets = load_prompt_datasets(config, tokenizer)
    train = [r.ground_truth for r in datasets.train]
    val = [r.ground_truth for r in datasets.val]
    assert (len(train), len(val)) == (15, 5)
    assert set(train).isdisjoint(val)
    assert sorted(train + val, key=int) == [str(i) for i in range(20)]
    assert all(r.prompt_token_ids for r in datasets.train + datasets.val)

    again = load_prompt_datasets(config, tokenizer)
    assert [r.ground_truth for r in again.val] == val  # the split depends only on data.seed


def test_load_prompt_datasets_reads_val_files(tmp_path, tokenizer):
    train = write_jsonl(tmp_path / "train.jsonl", [{"prompt": f"t{i}", "answer": "1"} for i in range(4)])
    val = write_jsonl(tmp_path / "val.jsonl", [{"prompt": "v", "answer": "2"}])
    datasets = load_prompt_datasets(DataConfig(train_files=[str(train)], val_files=[str(val)]), tokenizer)
    assert (len(datasets.train), len(datasets.val)) == (4, 1)
    assert datasets.val[0].messages[0]["content"] == "v"


def test_load_prompt_datasets_synthetic(tokenizer):
    config = DataConfig(synthetic=SyntheticTaskConfig(name="arithmetic", num_train=12, num_val=3, seed=7))
    datasets = load_prompt_datasets(config, tokenizer)
    assert (len(datasets.train), len(datasets.val)) == (12, 3)
    assert [r.messages for r in datasets.train] == [r.messages for r in arithmetic_records(12, seed=7)]
    first = datasets.train[0]
    assert len(first.prompt_token_ids) == len(first.messages[0]["content"]) + CHATML_OVERHEAD
