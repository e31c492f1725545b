"""The native engine against the reference `hf` engine: same tokens, same logprobs, one prefill per prompt."""

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from ascent.rollout.hf import HFRolloutEngine
from ascent.rollout.native import NativeRolloutEngine
from ascent.rollout.trajectories import SamplingParams


@pytest.fixture
def engines(make_policy, tokenizer):
    policy = make_policy("rollout.engine=native")
    assert isinstance(policy.engine, NativeRolloutEngine)
    return policy, policy.engine, HFRolloutEngine(policy.model, tokenizer)


def assert_same_output(ours, reference):
    assert ours.response_ids.tolist() == reference.response_ids.tolist()
    assert ours.finish_reasons == reference.finish_reasons
    assert ours.group_ids.tolist() == reference.group_ids.tolist()
    torch.testing.assert_close(ours.prompt_ids, reference.prompt_ids)
    torch.testing.assert_close(ours.rollout_logprobs, reference.rollout_logprobs, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(max_tokens=16, temperature=0.0, samples_per_prompt=2),
        SamplingParams(max_tokens=16, temperature=0.8, top_k=20, top_p=0.9, samples_per_prompt=3, seed=7),
    ],
    ids=["greedy", "sampled"],
)
def test_native_gives_the_hf_engines_tokens_for_ragged_prompts(engines, prompts, sampling):
    _, native, hf = engines
    assert len({len(prompt) for prompt in prompts}) > 1  # ragged
    assert_same_output(native.generate(prompts, sampling), hf.generate(prompts, sampling))


def test_stopped_rows_leave_the_batch_with_the_right_finish_reasons(engines, prompts):
    _, native, hf = engines
    sampling = SamplingParams(max_tokens=12, temperature=0.9, samples_per_prompt=4, seed=3)
    free_run = hf.generate(prompts, sampling)
    stop_token = int(free_run.response_ids[0, 2])  # a token some rows produce early: make it the EOS
    native.eos_token_ids = hf.eos_token_ids = [stop_token]
    ours, reference = native.generate(prompts, sampling), hf.generate(prompts, sampling)
    assert_same_output(ours, reference)
    assert "stop" in ours.finish_reasons and "length" in ours.finish_reasons
    for row, reason in zip(ours.response_ids, ours.finish_reasons, strict=True):
        length = int((row != 0).sum()) if reason == "length" else None
        if reason == "stop":
            assert stop_token in row.tolist()
        else:
            assert length == sampling.max_tokens and stop_token not in row.tolist()


def test_stop_strings_end_rows_the_same_way_in_both_engines(engines, prompts, tokenizer):
    _, native, hf = engines
    sampling = SamplingParams(max_tokens=16, temperature=1.0, min_p=0.05, samples_per_prompt=4, seed=2)
    free_run = hf.generate(prompts, sampling)
    stop = tokenizer.decode(free_run.response_ids[1, 3:5])  # two characters one sample writes early
    sampling.stop = (stop,)
    ours, reference = native.generate(prompts, sampling), hf.generate(prompts, sampling)
    assert_same_output(ours, reference)
    responses = [row[:length].tolist() for row, length in zip(ours.response_ids, ours.response_lengths, strict=True)]
    assert any(tokenizer.decode(response).endswith(stop) for response in responses)
    for response, reason in zip(responses, ours.finish_reasons, strict=True):
        assert stop not in tokenizer.decode(response[:-1])  # nothing before the end completes it
        if tokenizer.decode(response).endswith(stop):
            assert reason == "stop"


def test_sampled_logprobs_equal_the_policys_recomputed_logprobs(make_policy, prompts):
    policy = make_policy("rollout.engine=native", "rollout.temperature=0.7")
    sampling = SamplingParams(max_tokens=16, temperature=0.7, samples_per_prompt=4, seed=1)
    batch = policy.generate(prompts, sampling)
    mask = batch.response_mask.bool()
    assert (policy.compute_logprobs(batch)[mask] - batch.rollout_logprobs[mask]).abs().max() < 1e-4


def test_each_prompt_is_prefilled_once_for_all_its_samples(engines, prompts):
    _, native, _ = engines
    batch = native.generate(prompts, SamplingParams(max_tokens=4, temperature=1.0, samples_per_prompt=8, seed=0))
    assert len(batch) == 8 * len(prompts)
    assert native.prefilled_prompts == len(prompts)
    assert native.last_timings["prefill_s"] > 0 and native.last_timings["decode_s"] > 0


def test_sampling_is_reproducible_and_independent_of_the_batch(engines, prompts):
    _, native, _ = engines
    sampling = SamplingParams(max_tokens=10, temperature=1.0, samples_per_prompt=2, seed=5)
    whole = native.generate(prompts, sampling, prompt_seeds=[11, 12, 13, 14])
    again = native.generate(prompts, sampling, prompt_seeds=[11, 12, 13, 14])
    alone = native.generate(prompts[2:3], sampling, prompt_seeds=[13])
    assert whole.response_ids.tolist() == again.response_ids.tolist()
    width = alone.response_ids.shape[1]
    assert whole.response_ids[4:6, :width].tolist() == alone.response_ids.tolist()


ARCHITECTURES = {
    "qwen2 (biases)": (Qwen2Config, {}),
    "qwen3 (query/key norms)": (Qwen3Config, {"head_dim": 16}),
    "mistral (sliding window 5)": (MistralConfig, {"sliding_window": 5}),
    "llama (llama3 rope scaling)": (
        LlamaConfig,
        {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 16}},
    ),
}  # fmt: skip


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_each_supported_architecture_decodes_like_its_own_forward(architecture, tokenizer, prompts):
    config_class, extra = ARCHITECTURES[architecture]
    config = config_class(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    for sampling in (
        SamplingParams(max_tokens=12, temperature=0.0),
        SamplingParams(max_tokens=12, temperature=1.0, samples_per_prompt=2, seed=4),
    ):
        ours = NativeRolloutEngine(model, tokenizer).generate(prompts, sampling)
        assert_same_output(ours, HFRolloutEngine(model, tokenizer).generate(prompts, sampling))


def test_an_unsupported_architecture_names_the_fallback(tokenizer):
    model = SimpleNamespace(config=SimpleNamespace(model_type="gpt2"))
    with pytest.raises(ValueError, match=r"use rollout\.engine=hf"):
        NativeRolloutEngine(model, tokenizer)
