"""RayWorkerGroup: N Ray actors in a placement group, forming one torch.distributed world.

Each actor holds one worker (e.g. a PolicyWorker) of rank r. The controller calls `group.call(...)`
exactly as it calls the in-process group; methods marked `split` in the worker's DISPATCH get the batch
cut over the ranks (see `dispatch.py`), the others run on every rank with the same arguments.
Gloo on CPU, NCCL on GPU; every collective has the configured timeout, and a worker that raises or
dies surfaces at the controller with its rank instead of hanging the run.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ascent.controller.dispatch import ALL, SPLIT, gather_results, split_arguments


class WorkerError(RuntimeError):
    """A worker failed; the message names its rank and carries its original traceback."""


def connect_ray(address: str | None) -> None:
    """Join the cluster at `address` (`ray start --head` printed it), or start a private one on this machine.
    `address="local"` never attaches to a stale cluster left in /tmp/ray by an earlier run."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address)
    else:
        ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")


def _free_port() -> tuple[str, int]:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return ray.util.get_node_ip_address(), sock.getsockname()[1]


@ray.remote
class _RankProcess:
    """One rank: joins the process group, then builds and serves its worker."""

    def __init__(self, rank: int, world_size: int, address: str, port: int, backend: str, timeout_s: float) -> None:
        import torch.distributed as dist

        os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0"})
        dist.init_process_group(
            backend,
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        self.rank = rank
        self.worker = None

    def build(self, factory: Callable[[], Any]) -> None:
        self.worker = factory()

    def run(self, method: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.worker, method)(*args, **kwargs)

    def shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RayWorkerGroup:
    def __init__(
        self,
        factory: Callable[[], Any],
        dispatch: dict[str, str],
        num_workers: int,
        use_gpu: bool = False,
        timeout_s: float = 600.0,
        placement_strategy: str = "PACK",
    ) -> None:
        self.world_size = num_workers
        self.dispatch = dispatch
        self.timeout_s = timeout_s
        bundle = {"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1}
        self.placement_group = placement_group([bundle] * num_workers, strategy=placement_strategy)
        self._get(self.placement_group.ready(), "placement group")

        def in_bundle(index: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=index)

        free_port = ray.remote(num_cpus=0)(_free_port)
        address, port = self._get(free_port.options(scheduling_strategy=in_bundle(0)).remote(), "rendezvous")
        backend = "nccl" if use_gpu else "gloo"
        self.actors = [
            _RankProcess.options(num_cpus=1, num_gpus=1 if use_gpu else 0, scheduling_strategy=in_bundle(rank)).remote(
                rank, num_workers, address, port, backend, timeout_s
            )
            for rank in range(num_workers)
        ]
        self._get_all([actor.build.remote(factory) for actor in self.actors], "build")

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        mode = self.dispatch.get(method, ALL)
        if mode == SPLIT:
            split = split_arguments(args, self.world_size)
            futures = [
                actor.run.remote(method, rank_args, kwargs)
                for actor, rank_args in zip(self.actors, split.args_per_rank, strict=False)  # a rank may get none
            ]
            result = gather_results(self._get_all(futures, method), split)
            if isinstance(result, dict):
                result = result | {"rank_token_ratio": split.token_ratio}
            return result
        return self._get_all([actor.run.remote(method, args, kwargs) for actor in self.actors], method)[0]

    def shutdown(self) -> None:
        with contextlib.suppress(WorkerError):  # a dead worker has nothing left to shut down
            self._get_all([actor.shutdown.remote() for actor in self.actors], "shutdown")
        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.placement_group)

    def _get(self, future, what: str) -> Any:
        try:
            return ray.get(future, timeout=self.timeout_s)
        except GetTimeoutError as error:
            raise WorkerError(f"{what}: no answer within {self.timeout_s:.0f} s (trainer.worker_timeout_s)") from error

    def _get_all(self, futures: list, what: str) -> list[Any]:
        """Results in rank order. The first failure (an exception, a dead process, or the timeout) is raised
        as a WorkerError naming the rank, with the worker's own traceback."""
        pending = list(futures)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=self.timeout_s)
                if not done:
                    raise WorkerError(f"{what}: no answer within {self.timeout_s:.0f} s (trainer.worker_timeout_s)")
                ray.get(done[0])  # raises at once if that rank failed
            return ray.get(futures)
        except (RayTaskError, RayActorError) as error:
            failed = next(rank for rank, future in enumerate(futures) if _failed(future))
            raise WorkerError(f"{what} failed on rank {failed}:\n{error}") from error


def _failed(future) -> bool:
    try:
        ray.get(future, timeout=0)
        return False
    except (RayTaskError, RayActorError):
        return True
    except GetTimeoutError:
        return False
