"""The Ray backend on CPU: the same run as local mode, worker failures that surface at the controller."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")

from ascent.cli import main  # noqa: E402
from ascent.controller.dispatch import SPLIT  # noqa: E402
from ascent.controller.ray_group import RayWorld, WorkerError  # noqa: E402

DATA = Path(__file__).parent.parent / "data"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


def run(run_dir: Path, *overrides: str, expected_code: int = 0) -> list[dict]:
    code = main(
        [
            "train", "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
            "data.synthetic.name=arithmetic", "data.synthetic.num_val=0",
            f"reward.function={DATA / 'toy_rewards.py'}:count_sevens",
            "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
            "trainer.steps=3", "optim.lr=1e-2", "optim.micro_batch_size=4", "optim.mini_batch_size=8",
            f"trainer.output_dir={run_dir}", *overrides,
        ]
    )  # fmt: skip
    assert code == expected_code
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_two_ray_workers_reproduce_the_local_run(ray_cluster, tmp_path):
    # Summation order differs between one process and two ranks (~1e-7). Adam divides by sqrt(v), so at
    # a large lr a parameter with a near-zero gradient turns that into a visible weight difference.
    local = run(tmp_path / "local", "optim.lr=1e-4")
    distributed = run(tmp_path / "ray", "optim.lr=1e-4", "trainer.backend=ray", "trainer.num_workers=2")
    for here, there in zip(local, distributed, strict=True):
        for name in ("reward/mean", "policy/loss", "policy/pg_loss", "policy/grad_norm", "policy/entropy"):
            assert there[name] == pytest.approx(here[name], rel=1e-5, abs=1e-7), (here["step"], name)
        assert there["policy/rank_token_ratio"] >= 1.0
        # the engine's replica, refreshed from the gathered shards, samples with the trained weights
        assert there["rollout/logprob_abs_diff"] < 1e-5
    assert any(entry["policy/grad_norm"] > 0 for entry in local)
    local_model = AutoModelForCausalLM.from_pretrained(tmp_path / "local" / "final")
    ray_weights = dict(AutoModelForCausalLM.from_pretrained(tmp_path / "ray" / "final").named_parameters())
    for name, parameter in local_model.named_parameters():
        torch.testing.assert_close(ray_weights[name], parameter, rtol=1e-5, atol=1e-6, msg=name)


def test_ppo_with_a_critic_a_reference_and_uneven_filtered_batches_matches_the_local_run(ray_cluster, tmp_path):
    # Groups of 3 samples and the drop filter give batches of 3, 6, 9 or 12 samples: odd sizes are padded to
    # divide over the 2 ranks. Mini-batches of 6 samples: each rank trains on its half of each in turn.
    overrides = (
        "algorithm.name=ppo", "critic.lr=1e-3", "algorithm.kl.coef=0.05", "algorithm.kl.placement=loss",
        "algorithm.group_filter=drop", "rollout.samples_per_prompt=3", "optim.mini_batch_size=6",
        "optim.micro_batch_size=3", "optim.lr=1e-4",
    )  # fmt: skip
    local = run(tmp_path / "local", *overrides)
    distributed = run(tmp_path / "ray", *overrides, "trainer.backend=ray", "trainer.num_workers=2")
    assert any(entry["filter/trained_groups"] % 2 for entry in local if entry["step"] > 0)  # a padded batch
    names = ("reward/mean", "policy/loss", "policy/kl_ref", "policy/grad_norm", "critic/value_loss",
             "critic/grad_norm", "critic/returns_mean")  # fmt: skip
    assert all(any(name in entry for entry in local) for name in names)
    for here, there in zip(local, distributed, strict=True):
        for name in names:
            if name in here:  # a step whose groups all scored the same trains nothing
                assert there[name] == pytest.approx(here[name], rel=1e-5, abs=1e-7), (here["step"], name)
    heads = [load_file(tmp_path / mode / "critic" / "value_head.safetensors") for mode in ("local", "ray")]
    torch.testing.assert_close(heads[1], heads[0], rtol=1e-5, atol=1e-6)  # the critic gathered from its shards


def test_sft_on_two_ray_workers_matches_the_local_run(ray_cluster, tmp_path):
    def sft(run_dir: Path, *overrides: str) -> list[dict]:
        common = ["model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
                  "data.synthetic.name=arithmetic", "data.synthetic.num_val=8", "rollout.max_response_tokens=12",
                  "trainer.steps=3", "optim.lr=1e-3", "sft.batch_size=16", "optim.micro_batch_size=4"]  # fmt: skip
        assert main(["sft", *common, f"trainer.output_dir={run_dir}", *overrides]) == 0
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

    local = sft(tmp_path / "local")
    distributed = sft(tmp_path / "ray", "trainer.backend=ray", "trainer.num_workers=2")
    for here, there in zip(local, distributed, strict=True):
        for name in ("sft/nll", "policy/grad_norm", "val/nll", "val/accuracy"):
            if name in here:
                assert there[name] == pytest.approx(here[name], rel=1e-5, abs=1e-7), (here["step"], name)
    assert sum("sft/nll" in entry for entry in distributed) == 3


def test_a_worker_exception_reaches_the_controller_with_its_rank_and_traceback(ray_cluster):
    class Failing:
        def check(self, items):
            import torch.distributed as dist

            if dist.get_rank() == 1:
                raise ValueError("rank one is broken on purpose")
            return torch.tensor(items)

    group = RayWorld(num_workers=2, timeout_s=120).group("failing", Failing, {"check": SPLIT})
    try:
        with pytest.raises(WorkerError, match="check failed on rank 1") as info:
            group.call("check", [[1], [2]])
        message = str(info.value)
        assert "rank one is broken on purpose" in message and "in check" in message  # the worker's own frames
    finally:
        group.shutdown()


def test_a_killed_worker_ends_the_call_with_a_clear_error_instead_of_hanging(ray_cluster):
    class Sleepy:
        def pid(self):
            return os.getpid()

        def nap(self, seconds):
            time.sleep(seconds)

    group = RayWorld(num_workers=2, timeout_s=120).group("sleepy", Sleepy, {})
    try:
        pids = [ray.get(actor.run.remote("sleepy", "pid", (), {})) for actor in group.world.actors]
        threading.Timer(1.0, os.kill, (pids[1], signal.SIGKILL)).start()
        start = time.perf_counter()
        with pytest.raises(WorkerError, match="nap failed: rank 1's process died"):
            group.call("nap", 60)
        assert time.perf_counter() - start < 30
    finally:
        group.shutdown()


def logits_of(model_dir: Path) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        return model(torch.tensor([[3, 14, 15, 92, 65, 35]])).logits


def test_checkpoints_move_between_two_ray_workers_and_local_mode(ray_cluster, tmp_path):
    # A run saved at step 2 in one mode continues in the other: steps 3 and 4 match the straight local run.
    straight = run(tmp_path / "straight", "optim.lr=1e-4", "trainer.steps=4")
    ray = ("trainer.backend=ray", "trainer.num_workers=2")
    for name, first, second in (("ray-then-local", ray, ()), ("local-then-ray", (), ray)):
        run_dir = tmp_path / name
        run(run_dir, "optim.lr=1e-4", "trainer.steps=2", "trainer.save_every=2", *first)
        resumed = run(run_dir, "optim.lr=1e-4", "trainer.steps=4", "trainer.save_every=2", *second)
        assert [entry["step"] for entry in resumed] == [1, 2, 3, 4]
        for here, there in zip(straight[2:], resumed[2:], strict=True):
            for metric in ("reward/mean", "policy/loss", "policy/grad_norm", "policy/entropy"):
                assert there[metric] == pytest.approx(here[metric], rel=1e-5, abs=1e-7), (name, here["step"], metric)
        torch.testing.assert_close(
            logits_of(run_dir / "final"), logits_of(tmp_path / "straight" / "final"), rtol=1e-5, atol=1e-5
        )


def rank_process_ids() -> list[int]:
    """The Ray actor processes serving ranks, among this test process's descendants."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue

    def descends_from_us(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    found = []
    for pid in parents:
        try:
            command = (Path("/proc") / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if b"_RankProcess" in command and descends_from_us(pid):
            found.append(pid)
    return found


def test_a_worker_killed_mid_run_stops_it_with_a_clear_error_and_resume_completes_it(ray_cluster, tmp_path, capsys):
    run_dir = tmp_path / "run"
    killed = []

    def kill_a_rank_after_the_second_checkpoint():
        deadline = time.monotonic() + 300
        while not (run_dir / "checkpoints" / "step_000002").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = rank_process_ids()
        if pids:
            os.kill(pids[-1], signal.SIGKILL)
            killed.append(time.monotonic())

    settings = ("trainer.steps=6", "trainer.save_every=2", "trainer.backend=ray", "trainer.num_workers=2",
                "trainer.worker_timeout_s=60")  # fmt: skip
    threading.Thread(target=kill_a_rank_after_the_second_checkpoint, daemon=True).start()
    run(run_dir, *settings, expected_code=1)
    assert killed and time.monotonic() - killed[0] < 60  # stopped within the timeout, not hung
    error = capsys.readouterr().err
    continue_command = f"ascent train {run_dir}/config.yaml"
    assert "process died" in error and continue_command in error
    assert main(continue_command.split()[1:]) == 0  # the command the error suggests
    resumed = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in resumed] == [1, 2, 3, 4, 5, 6]
    assert (run_dir / "final" / "model.safetensors").exists()
