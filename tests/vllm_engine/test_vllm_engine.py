"""The vLLM engine against the reference `hf` engine: greedy tokens, logprobs, finish reasons, weight updates.

Tolerance: both engines run the model in float32; vLLM's kernels (fused q/k/v and gate/up projections, paged
attention, oneDNN GEMMs on CPU) only add in another order, so logits differ by float32 rounding. A logprob is
a log-softmax of such logits and moves by as much: measured at most 9.5e-7 here (greedy and sampled, tiny
Qwen2, 32 tokens). 1e-5 leaves ten times that for other CPUs' kernels while still catching a wrong
temperature or a stale weight, which move logprobs by 1e-2 or more. Greedy tokens then agree exactly (a flip
needs two logits tied to within ~1e-6). In bfloat16 neither holds: the greedy response to 1 of 4 prompts
diverged, and sampled logprobs differed by up to 1e-2 (see docs/rollout.md). Sampled tokens are compared
with the policy's own recomputation, not with `hf`: vLLM draws its own noise (see `ascent.rollout.vllm_engine`).
"""

import dataclasses
import sys

import pytest
import torch

from ascent.rollout.engine import build_rollout_engine
from ascent.rollout.hf import HFRolloutEngine
from ascent.rollout.trajectories import SamplingParams
from ascent.rollout.vllm_engine import VLLMRolloutEngine

pytest.importorskip("vllm", reason="needs vLLM, which lives in a venv of its own: run `make test-vllm`")

LOGPROB_ATOL = 1e-5  # float32 in both engines: see the module docstring


@pytest.fixture(scope="module")
def engines(policy, tokenizer):
    assert isinstance(policy.engine, VLLMRolloutEngine)
    return policy.engine, HFRolloutEngine(policy.model, tokenizer)


def assert_same_output(ours, reference):
    assert ours.response_ids.tolist() == reference.response_ids.tolist()
    assert ours.response_mask.tolist() == reference.response_mask.tolist()
    assert ours.finish_reasons == reference.finish_reasons
    assert ours.group_ids.tolist() == reference.group_ids.tolist()
    torch.testing.assert_close(ours.prompt_ids, reference.prompt_ids)
    torch.testing.assert_close(ours.prompt_mask, reference.prompt_mask)
    torch.testing.assert_close(ours.loss_mask, reference.loss_mask)
    torch.testing.assert_close(ours.rollout_logprobs, reference.rollout_logprobs, rtol=0, atol=LOGPROB_ATOL)


def test_greedy_decoding_gives_the_hf_engines_tokens_for_ragged_prompts(engines, prompts):
    vllm_engine, hf = engines
    assert len({len(prompt) for prompt in prompts}) > 1  # ragged
    sampling = SamplingParams(max_tokens=16, temperature=0.0, samples_per_prompt=2)
    ours = vllm_engine.generate(prompts, sampling)
    assert_same_output(ours, hf.generate(prompts, sampling))
    assert ours.finish_reasons == ["length"] * 8  # a random model does not emit EOS: every row hits max_tokens


def test_greedy_rows_stop_at_eos_like_the_hf_engine(engines, prompts):
    vllm_engine, hf = engines
    sampling = SamplingParams(max_tokens=12, temperature=0.0)
    free_run = hf.generate(prompts, sampling)
    stop_token = int(free_run.response_ids[0, 3])  # make a token that row 0 produces the EOS
    saved = vllm_engine.eos_token_ids, hf.eos_token_ids
    vllm_engine.eos_token_ids = hf.eos_token_ids = [stop_token]
    try:
        ours = vllm_engine.generate(prompts, sampling)
        assert_same_output(ours, hf.generate(prompts, sampling))
    finally:
        vllm_engine.eos_token_ids, hf.eos_token_ids = saved
    assert ours.finish_reasons[0] == "stop"


def test_sampled_rows_stop_at_eos_or_run_to_max_tokens(engines, prompts):
    vllm_engine, _ = engines
    sampling = SamplingParams(max_tokens=12, temperature=1.0, samples_per_prompt=4, seed=3)
    free_run = vllm_engine.generate(prompts, sampling)
    stop_token = int(free_run.response_ids[0, 2])
    saved = vllm_engine.eos_token_ids
    vllm_engine.eos_token_ids = [stop_token]
    try:
        stopped = vllm_engine.generate(prompts, sampling)
    finally:
        vllm_engine.eos_token_ids = saved
    assert "stop" in stopped.finish_reasons and "length" in stopped.finish_reasons
    for row in range(len(stopped)):
        full = free_run.response_ids[row].tolist()
        response = stopped.response_ids[row, : int(stopped.response_mask[row].sum())].tolist()
        if stop_token in full:  # the same draws up to the first EOS, which ends the response
            assert stopped.finish_reasons[row] == "stop"
            assert response == full[: full.index(stop_token) + 1]
        else:
            assert stopped.finish_reasons[row] == "length"
            assert response == full and len(response) == sampling.max_tokens
    assert (stopped.loss_mask == stopped.response_mask).all()


def test_stop_strings_end_responses_like_the_hf_engine(engines, prompts, tokenizer):
    vllm_engine, hf = engines
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    stop = tokenizer.decode(hf.generate(prompts, greedy).response_ids[1, 4:6])  # completed by row 1's 6th token
    ours = vllm_engine.generate(prompts, dataclasses.replace(greedy, stop=(stop,)))
    assert_same_output(ours, hf.generate(prompts, dataclasses.replace(greedy, stop=(stop,))))
    assert ours.finish_reasons[1] == "stop" and ours.response_mask[1].sum() <= 6

    sampled = SamplingParams(max_tokens=12, temperature=1.0, samples_per_prompt=4, seed=3)
    free_run = vllm_engine.generate(prompts, sampled)
    stop = tokenizer.decode(free_run.response_ids[0, 2:4])
    stopped = vllm_engine.generate(prompts, dataclasses.replace(sampled, stop=(stop,)))
    for row in range(len(stopped)):  # the same draws, cut where the string first appears
        full = tokenizer.decode(free_run.response_ids[row])
        response = stopped.response_ids[row, : int(stopped.response_mask[row].sum())]
        assert (stopped.finish_reasons[row] == "stop") == (stop in full)
        assert tokenizer.decode(response) == (full[: full.index(stop) + len(stop)] if stop in full else full)
    torch.testing.assert_close(
        stopped.rollout_logprobs, free_run.rollout_logprobs[:, : stopped.response_ids.shape[1]] * stopped.response_mask
    )


def test_sampled_logprobs_equal_the_policys_recomputed_logprobs(policy, prompts):
    sampling = SamplingParams(max_tokens=16, temperature=0.7, samples_per_prompt=4, seed=1)  # policy's T
    batch = policy.generate(prompts, sampling)
    assert batch.group_ids.tolist() == [i for i in range(len(prompts)) for _ in range(4)]
    mask = batch.response_mask.bool()
    assert (policy.compute_logprobs(batch)[mask] - batch.rollout_logprobs[mask]).abs().max() < LOGPROB_ATOL
    assert (batch.rollout_logprobs[~mask] == 0).all()


def test_with_top_p_the_logprobs_are_those_of_the_truncated_distribution(policy, prompts):
    """vLLM reports log p_T(token) - log(probability mass top-p kept): never below the policy's log p_T."""
    sampling = SamplingParams(max_tokens=16, temperature=0.7, top_p=0.9, samples_per_prompt=4, seed=2)
    batch = policy.generate(prompts, sampling)
    mask = batch.response_mask.bool()
    kept_mass = torch.exp(policy.compute_logprobs(batch)[mask] - batch.rollout_logprobs[mask])
    assert (kept_mass <= 1 + LOGPROB_ATOL).all() and (kept_mass >= sampling.top_p - LOGPROB_ATOL).all()
    assert (kept_mass < 0.99).any()


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch(engines, prompts):
    vllm_engine, _ = engines
    sampling = SamplingParams(max_tokens=10, temperature=1.0, samples_per_prompt=2, seed=5)
    whole = vllm_engine.generate(prompts, sampling, prompt_seeds=[11, 12, 13, 14])
    again = vllm_engine.generate(prompts, sampling, prompt_seeds=[11, 12, 13, 14])
    alone = vllm_engine.generate(prompts[2:3], sampling, prompt_seeds=[13])
    other_seed = vllm_engine.generate(prompts[2:3], sampling, prompt_seeds=[99])
    assert whole.response_ids.tolist() == again.response_ids.tolist()
    width = alone.response_ids.shape[1]
    assert whole.response_ids[4:6, :width].tolist() == alone.response_ids.tolist()
    assert alone.response_ids[0].tolist() != alone.response_ids[1].tolist()  # a group's samples differ
    assert alone.response_ids.tolist() != other_seed.response_ids.tolist()


def test_a_weight_update_makes_vllm_follow_the_updated_policy(policy, engines, prompts):
    """The trainer's path: the policy's weights change in place, `sync_rollout_weights` pushes them."""
    vllm_engine, hf = engines
    sampling = SamplingParams(max_tokens=16, temperature=0.0)
    before = vllm_engine.generate(prompts, sampling)
    original = {name: parameter.detach().clone() for name, parameter in policy.model.named_parameters()}
    try:
        perturb(policy.model, seed=1)
        policy.sync_rollout_weights()
        updated = vllm_engine.generate(prompts, sampling)
        assert updated.response_ids.tolist() != before.response_ids.tolist()
        assert_same_output(updated, hf.generate(prompts, sampling))
    finally:
        restore(policy, original)
    assert_same_output(vllm_engine.generate(prompts, sampling), before)


def test_weights_pushed_in_buckets_that_split_a_decoder_block(policy, engines, prompts):
    """Sharded training pushes buckets of a size, not of whole layers: a block's q/k/v may straddle two."""
    vllm_engine, hf = engines
    sampling = SamplingParams(max_tokens=16, temperature=0.0)
    original = {name: parameter.detach().clone() for name, parameter in policy.model.named_parameters()}
    try:
        perturb(policy.model, seed=2)
        named = [(name, parameter.detach().clone()) for name, parameter in policy.model.named_parameters()]
        split = next(i for i, (name, _) in enumerate(named) if name.endswith("layers.1.self_attn.k_proj.weight"))
        for bucket in (named[:split], named[split:]):
            vllm_engine.update_weights(iter(bucket))
            for _, tensor in bucket:
                tensor.fill_(float("nan"))  # the caller reuses its buffers once a bucket is loaded
        assert not vllm_engine._pending
        assert_same_output(vllm_engine.generate(prompts, sampling), hf.generate(prompts, sampling))
    finally:
        restore(policy, original)


def test_sleep_and_wake_leave_the_engine_usable(engines, prompts):
    vllm_engine, hf = engines
    sampling = SamplingParams(max_tokens=8, temperature=0.0)
    vllm_engine.sleep()
    vllm_engine.wake()
    assert_same_output(vllm_engine.generate(prompts, sampling), hf.generate(prompts, sampling))


def test_the_registry_builds_it_and_a_missing_vllm_names_the_install(monkeypatch, policy, tokenizer):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install ascent\[vllm\].*make test-vllm"):
        build_rollout_engine("vllm", policy.model, tokenizer)


def perturb(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * parameter.std() * torch.randn(parameter.shape, generator=generator))


def restore(policy, original: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            parameter.copy_(original[name])
    policy.sync_rollout_weights()
