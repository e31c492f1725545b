"""Two Ray nodes on one machine (ray.cluster_utils.Cluster): one worker per node, one torch.distributed world."""

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")

from ray.cluster_utils import Cluster  # noqa: E402

from ascent.cli import main  # noqa: E402
from ascent.controller.ray_group import RayWorld  # noqa: E402

DATA = Path(__file__).parent.parent / "data"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes():
    if ray.is_initialized():  # another module's cluster
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_one_worker_per_node_forms_one_world(two_nodes):
    class WhereAmI:  # defined here so that Ray ships the class itself, not a reference to this test module
        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

        def sum_of_ranks(self) -> int:
            import torch
            import torch.distributed as dist

            total = torch.tensor([dist.get_rank()])
            dist.all_reduce(total)
            return int(total)

    world = RayWorld(num_workers=2, nnodes=2, timeout_s=120)
    try:
        group = world.group("probe", WhereAmI, {})
        nodes = [ray.get(actor.run.remote("probe", "node", (), {})) for actor in world.actors]
        assert len(set(nodes)) == 2  # STRICT_SPREAD put the ranks on different nodes
        assert group.call("sum_of_ranks") == 1  # a gloo collective across the nodes
    finally:
        world.shutdown()


def test_a_run_on_two_nodes_trains_two_steps(two_nodes, tmp_path):
    # with activation checkpointing under FSDP2, which recomputes each block's forward in the backward pass
    code = main(
        [
            "train", "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
            "data.synthetic.name=arithmetic", "data.synthetic.num_val=0",
            f"reward.function={DATA / 'toy_rewards.py'}:count_sevens",
            "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
            "trainer.steps=2", "optim.lr=1e-2", "optim.micro_batch_size=4", "optim.mini_batch_size=8",
            "trainer.backend=ray", "trainer.num_workers=2", "trainer.nnodes=2", f"ray.address={two_nodes.address}",
            "model.gradient_checkpointing=true",
            f"trainer.output_dir={tmp_path}",
        ]
    )  # fmt: skip
    assert code == 0
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in metrics] == [1, 2]
    assert all("policy/grad_norm" in entry and entry["policy/rank_token_ratio"] >= 1 for entry in metrics)
    assert (tmp_path / "final" / "model.safetensors").exists()
