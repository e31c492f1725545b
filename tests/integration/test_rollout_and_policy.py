"""The HF engine against the policy's own numerics, and the update's accumulation contract."""

import pytest
import torch

from ascent.algorithms.advantages import compute_advantages, token_level_rewards
from ascent.rollout.trajectories import SamplingParams
from ascent.workers.policy import LossCoefficients
from ascent.workers.reference import ReferenceWorker

from .conftest import make_config


def test_engine_logprobs_equal_recomputed_policy_logprobs(make_policy, prompts):
    policy = make_policy("rollout.temperature=0.7")
    sampling = SamplingParams(max_tokens=12, temperature=0.7, top_p=1.0, top_k=0, samples_per_prompt=3, seed=5)
    batch = policy.generate(prompts, sampling)
    recomputed = policy.compute_logprobs(batch)
    mask = batch.response_mask.bool()
    assert (recomputed[mask] - batch.rollout_logprobs[mask]).abs().max() < 1e-4
    assert (batch.rollout_logprobs[mask] < 0).all()
    assert (batch.rollout_logprobs[~mask] == 0).all()


def test_engine_output_layout(make_policy, prompts, tokenizer):
    policy = make_policy()
    batch = policy.generate(prompts, SamplingParams(max_tokens=10, temperature=1.0, samples_per_prompt=4, seed=1))
    assert len(batch) == 16
    assert batch.group_ids.tolist() == [g for g in range(4) for _ in range(4)]
    eos = tokenizer.eos_token_id
    for row in range(len(batch)):
        length = int(batch.response_lengths[row])
        ids = batch.response_ids[row, :length].tolist()
        if batch.finish_reasons[row] == "stop":
            assert ids[-1] == eos and eos not in ids[:-1]
        else:
            assert batch.finish_reasons[row] == "length" and length == 10 and eos not in ids
        assert batch.loss_mask[row].sum() == length
    # prompts are left-padded copies of the input ids, repeated per sample
    for row, group in enumerate(batch.group_ids.tolist()):
        real = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()
        assert real == prompts[group]


def test_generation_is_reproducible_for_a_seed(make_policy, prompts):
    policy = make_policy()
    sampling = SamplingParams(max_tokens=8, temperature=1.0, samples_per_prompt=2, seed=3)
    first, second = policy.generate(prompts, sampling), policy.generate(prompts, sampling)
    assert torch.equal(first.response_ids, second.response_ids)
    other = policy.generate(prompts, SamplingParams(max_tokens=8, temperature=1.0, samples_per_prompt=2, seed=4))
    assert not torch.equal(first.response_ids, other.response_ids)


def test_greedy_sampling_is_the_argmax_continuation(make_policy, prompts):
    policy = make_policy()
    greedy = SamplingParams(max_tokens=6, temperature=0.0, samples_per_prompt=2, seed=0)
    batch = policy.generate(prompts, greedy)
    assert torch.equal(batch.response_ids[0::2], batch.response_ids[1::2])  # both samples of a prompt agree


def _scored_batch(policy, prompts):
    batch = policy.generate(prompts, SamplingParams(max_tokens=8, temperature=1.0, samples_per_prompt=4, seed=2))
    batch.rewards = torch.tensor([float(i % 3 == 0) for i in range(len(batch))])
    token_rewards = token_level_rewards(batch.rewards, batch.loss_mask)
    advantages = compute_advantages("grpo", batch.rewards, token_rewards, batch.loss_mask, batch.group_ids)
    batch.advantages = advantages.advantages
    batch.old_logprobs = policy.compute_logprobs(batch)
    return batch


# clip_cov and kl_cov pick their tokens within each micro-batch by design, so they are not in this list.
@pytest.mark.parametrize(
    ("loss", "aggregation"),
    [
        ("ppo_clip", "token-mean"),
        ("ppo_clip", "token-sum"),
        ("ppo_clip", "seq-mean-token-sum"),
        ("ppo_clip", "seq-mean-token-mean"),
        ("ppo_clip", "seq-mean-token-sum-norm"),
        ("gspo", "seq-mean-token-mean"),
        ("gmpo", "seq-mean-token-mean"),
        ("cispo", "token-mean"),
        ("sapo", "token-mean"),
        ("gpg", "token-mean"),
        ("dro", "token-mean"),
    ],
)
def test_micro_batched_loss_and_gradient_equal_the_full_batch(make_policy, prompts, loss, aggregation):
    # Large max_grad_norm: clipping would rescale both the same way, but we compare raw gradients.
    common = (
        "optim.max_grad_norm=1e9", "optim.lr=1e-3", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
        f"algorithm.policy_loss={loss}", f"algorithm.loss_aggregation={aggregation}",
    )  # fmt: skip
    full = make_policy(*common, "optim.micro_batch_size=16")
    micro = make_policy(*common, "optim.micro_batch_size=2")
    batch = _scored_batch(full, prompts)
    full_metrics, micro_metrics = full.update(batch), micro.update(batch)
    assert micro_metrics["pg_loss"] == pytest.approx(full_metrics["pg_loss"], rel=1e-5, abs=1e-5)
    assert micro_metrics["entropy"] == pytest.approx(full_metrics["entropy"], rel=1e-5, abs=1e-5)
    micro_parameters = dict(micro.model.named_parameters())
    for name, p_full in full.model.named_parameters():
        torch.testing.assert_close(micro_parameters[name].grad, p_full.grad, atol=1e-6, rtol=1e-4, msg=name)
    assert any(p.grad.abs().sum() > 0 for p in full.model.parameters())


def test_update_changes_weights_that_the_engine_then_samples_with(make_policy, prompts):
    policy = make_policy("optim.lr=1e-2", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4")
    batch = _scored_batch(policy, prompts)
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    metrics = policy.update(batch)
    assert metrics["lr"] == pytest.approx(1e-2) and metrics["grad_norm"] > 0
    assert all(not torch.equal(before[name], p) for name, p in policy.model.named_parameters())
    assert policy.sync_rollout_weights() == 1
    resampled = policy.generate(prompts, SamplingParams(max_tokens=8, temperature=1.0, samples_per_prompt=4, seed=2))
    assert resampled.policy_version == 1
    # the engine shares the updated module: its logprobs match the new weights, not the old ones
    new_logprobs = policy.compute_logprobs(resampled)
    mask = resampled.response_mask.bool()
    assert (new_logprobs[mask] - resampled.rollout_logprobs[mask]).abs().max() < 1e-4


def test_reference_kl_is_zero_at_start_and_grows_after_updates(make_policy, prompts, tokenizer):
    overrides = ("algorithm.kl.coef=0.1", "optim.lr=1e-2", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4")
    policy = make_policy(*overrides)
    reference = ReferenceWorker(make_config(*overrides), tokenizer, torch.device("cpu"))
    batch = _scored_batch(policy, prompts)
    batch.ref_logprobs = reference.compute_logprobs(batch)
    torch.testing.assert_close(batch.ref_logprobs, batch.old_logprobs)
    first = policy.update(batch, coefficients=LossCoefficients(kl=0.1))
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-7)
    second = policy.update(batch, coefficients=LossCoefficients(kl=0.1))  # same batch, moved weights: k3 > 0
    assert second["kl_ref"] > 1e-6
    assert all(not p.requires_grad for p in reference.model.parameters())


def test_a_prompts_samples_do_not_depend_on_the_rest_of_the_batch(make_policy, prompts):
    policy = make_policy()
    sampling = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9, samples_per_prompt=3, seed=0)
    together = policy.generate(prompts, sampling, prompt_seeds=[11, 12, 13, 14][: len(prompts)])
    alone = policy.generate(prompts[1:2], sampling, prompt_seeds=[12])
    rows = together.group_ids == 1
    width = alone.response_ids.shape[1]
    assert torch.equal(together.response_ids[rows][:, :width], alone.response_ids)
    torch.testing.assert_close(together.rollout_logprobs[rows][:, :width], alone.rollout_logprobs, atol=1e-5, rtol=0)
