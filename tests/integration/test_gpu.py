"""The same contracts on CUDA: engine/policy logprob agreement in fp32, and a bf16 update."""

import pytest
import torch

from ascent.algorithms.advantages import compute_advantages, token_level_rewards
from ascent.rollout.trajectories import SamplingParams
from ascent.workers.policy import PolicyWorker

from .conftest import make_config

pytestmark = pytest.mark.gpu


def make_cuda_policy(tokenizer, *overrides):
    torch.manual_seed(0)
    config = make_config("trainer.device=cuda", "model.path=tiny:llama", *overrides)
    return PolicyWorker(config, tokenizer, torch.device("cuda"), total_steps=10)


def test_cuda_engine_logprobs_equal_recomputed_policy_logprobs(tokenizer, prompts):
    torch.backends.cuda.matmul.allow_tf32 = False
    policy = make_cuda_policy(tokenizer, "rollout.temperature=0.7")
    batch = policy.generate(prompts, SamplingParams(max_tokens=16, temperature=0.7, samples_per_prompt=4, seed=1))
    recomputed = policy.compute_logprobs(batch)
    mask = batch.response_mask.bool()
    assert (recomputed[mask] - batch.rollout_logprobs[mask]).abs().max() < 1e-4


def test_bf16_update_moves_the_policy_and_keeps_the_engine_in_step(tokenizer, prompts):
    policy = make_cuda_policy(tokenizer, "model.dtype=bfloat16", "optim.lr=1e-3")
    batch = policy.generate(prompts, SamplingParams(max_tokens=16, temperature=1.0, samples_per_prompt=4, seed=1))
    assert next(policy.model.parameters()).dtype == torch.bfloat16
    batch.rewards = torch.tensor([float(i % 2) for i in range(len(batch))])
    token_rewards = token_level_rewards(batch.rewards, batch.loss_mask)
    advantages = compute_advantages("grpo", batch.rewards, token_rewards, batch.loss_mask, batch.group_ids)
    batch.advantages = advantages.advantages
    batch.old_logprobs = policy.compute_logprobs(batch)
    before = [p.detach().clone() for p in policy.model.parameters()]
    metrics = policy.update(batch)
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    assert any(not torch.equal(b, p) for b, p in zip(before, policy.model.parameters(), strict=True))
    assert policy.sync_rollout_weights() == 1
    # bf16 numerics: engine and trainer agree to bf16 precision, not fp32's
    after = policy.generate(prompts, SamplingParams(max_tokens=16, temperature=1.0, samples_per_prompt=4, seed=2))
    mask = after.response_mask.bool()
    assert (policy.compute_logprobs(after)[mask] - after.rollout_logprobs[mask]).abs().mean() < 0.05


def test_a_ray_worker_on_the_gpu_trains_over_nccl_with_gloo_for_cpu_tensors(tmp_path):
    # One GPU, so one rank: NCCL refuses two ranks on one device. It still checks the process group
    # ("cpu:gloo,cuda:nccl": the loss normaliser is reduced as a CPU tensor) and the actor's device.
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
    from pathlib import Path

    from ascent.cli import main

    rewards = Path(__file__).parent.parent / "data" / "toy_rewards.py"
    ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        code = main(
            [
                "train", "model.path=tiny:llama", "trainer.progress_bar=false", "data.synthetic.name=arithmetic",
                "data.synthetic.num_val=0", f"reward.function={rewards}:count_sevens", "trainer.steps=2",
                "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
                "trainer.backend=ray", "trainer.num_workers=1", "trainer.gpus_per_node=1",
                f"trainer.output_dir={tmp_path}",
            ]
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert code == 0
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
