"""The Ray backend: N Ray actors in a placement group (a RayWorld) forming one torch.distributed world.

Each actor holds rank r's worker of every role (policy, reference, critic), colocated on its device; a
RayWorkerGroup is one role's view of the world. The controller calls `group.call(...)`
exactly as it calls the in-process group; methods marked `split` in the worker's DISPATCH get the batch
cut over the ranks (see `dispatch.py`), the others run on every rank with the same arguments.
Gloo on CPU, NCCL on GPU; every collective has the configured timeout, and a worker that raises or
dies surfaces at the controller with its rank instead of hanging the run.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ascent.controller.dispatch import ALL, SPLIT, SPLIT_MINI_BATCHES, gather_results, split_arguments
from ascent.controller.worker_group import WorkerError

_SETTLE_S = 5.0  # how long a failed call waits for the other ranks' outcome before reporting


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
    """One rank: joins the process group, then builds and serves its workers, one per role (policy,
    reference, critic), which take turns on the same device."""

    def __init__(self, rank: int, world_size: int, address: str, port: int, backend: str, timeout_s: float) -> None:
        import torch
        import torch.distributed as dist

        os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0"})
        if "nccl" in backend:
            torch.cuda.set_device(0)  # Ray makes the actor's GPU its only visible device
        dist.init_process_group(
            backend,
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        self.workers: dict[str, Any] = {}

    def build(self, role: str, factory: Callable[[], Any]) -> None:
        self.workers[role] = factory()

    def run(self, role: str, method: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.workers[role], method)(*args, **kwargs)

    def shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RayWorld:
    """`num_workers` actors, `num_workers / nnodes` on each node, forming one torch.distributed world.

    Each node gets one placement-group bundle (spread strictly over distinct nodes when nnodes > 1); a rank
    takes one CPU, and one GPU when `use_gpu`. Roles are colocated: `group(role, ...)` builds that role's
    worker in every actor and returns the WorkerGroup the trainer calls.
    """

    def __init__(self, num_workers: int, nnodes: int = 1, use_gpu: bool = False, timeout_s: float = 600.0) -> None:
        if num_workers % nnodes:
            raise ValueError(f"{num_workers} workers do not spread evenly over {nnodes} nodes")
        self.world_size = num_workers
        self.timeout_s = timeout_s
        per_node = num_workers // nnodes
        bundle = {"CPU": per_node, "GPU": per_node} if use_gpu else {"CPU": per_node}
        strategy = "STRICT_SPREAD" if nnodes > 1 else "PACK"
        self.placement_group = placement_group([bundle] * nnodes, strategy=strategy)
        self.actors: list = []
        self._closed = False
        try:
            self._get(self.placement_group.ready(), f"placement group ({nnodes} x {bundle}, {strategy})")
        except WorkerError:
            self.shutdown()  # a pending group would keep its resources reserved on the cluster
            raise

        def on_node(node: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=node)

        free_port = ray.remote(num_cpus=0)(_free_port)
        address, port = self._get(free_port.options(scheduling_strategy=on_node(0)).remote(), "rendezvous")
        # NCCL for CUDA tensors; gloo too on GPU, for the few CPU tensors the workers reduce (loss normalisers).
        backend = "cpu:gloo,cuda:nccl" if use_gpu else "gloo"
        self.actors = [
            _RankProcess.options(
                num_cpus=1, num_gpus=1 if use_gpu else 0, scheduling_strategy=on_node(rank // per_node)
            ).remote(rank, num_workers, address, port, backend, timeout_s)
            for rank in range(num_workers)
        ]

    def group(
        self, role: str, factory: Callable[[], Any], dispatch: dict[str, str], mini_batch_size: int = 0
    ) -> RayWorkerGroup:
        """Build `factory()` as `role` on every rank (FSDP2 set-up needs no collective) and return the group
        that dispatches its methods; `mini_batch_size` (samples over all ranks, 0 = the whole batch) is how
        `split-mini-batches` methods cut their batch."""
        self.results([actor.build.remote(role, factory) for actor in self.actors], f"building {role}")
        return RayWorkerGroup(self, role, dispatch, mini_batch_size)

    def shutdown(self) -> None:
        """Stop every actor and free the placement group; safe to call again. Each rank gets a few seconds to
        leave the process group; one still busy (e.g. blocked in a collective whose peer failed) is killed."""
        if self._closed:
            return
        self._closed = True
        if self.actors:
            leaving = [actor.shutdown.remote() for actor in self.actors]
            ray.wait(leaving, num_returns=len(leaving), timeout=_SETTLE_S)
        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.placement_group)

    def _get(self, future, what: str) -> Any:
        try:
            return ray.get(future, timeout=self.timeout_s)
        except GetTimeoutError as error:
            raise WorkerError(f"{what}: no answer within {self.timeout_s:.0f} s (trainer.worker_timeout_s)") from error

    def results(self, futures: list, what: str) -> list[Any]:
        """Results in rank order. A failure (an exception, a dead process, or the timeout) is raised as a
        WorkerError naming the rank, with the worker's own traceback. When a rank dies its peers fail too,
        inside a collective; the dead rank is the one reported."""
        pending = list(futures)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=self.timeout_s)
                if not done:
                    raise WorkerError(f"{what}: no answer within {self.timeout_s:.0f} s (trainer.worker_timeout_s)")
                ray.get(done[0])  # raises at once if that rank failed
            return ray.get(futures)
        except (RayTaskError, RayActorError):
            ray.wait(futures, num_returns=len(futures), timeout=_SETTLE_S)  # let a peer's death show
            failures = [(rank, _failure(future)) for rank, future in enumerate(futures)]
            failures = [(rank, error) for rank, error in failures if error is not None]
            rank, error = min(failures, key=lambda failure: not isinstance(failure[1], RayActorError))
            if isinstance(error, RayActorError):
                raise WorkerError(
                    f"{what} failed: rank {rank}'s process died (killed, out of memory, or crashed):\n{error}"
                ) from error
            raise WorkerError(f"{what} failed on rank {rank}:\n{error}") from error


class RayWorkerGroup:
    """One role's view of a RayWorld: `call` dispatches a method of that role's workers over the ranks."""

    def __init__(self, world: RayWorld, role: str, dispatch: dict[str, str], mini_batch_size: int = 0) -> None:
        self.world = world
        self.role = role
        self.dispatch = dispatch
        self.mini_batch_size = mini_batch_size
        self.world_size = world.world_size

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        actors, role = self.world.actors, self.role
        mode = self.dispatch.get(method, ALL)
        if mode in (SPLIT, SPLIT_MINI_BATCHES):
            split = split_arguments(args, self.world_size, self.mini_batch_size if mode == SPLIT_MINI_BATCHES else 0)
            futures = [
                actor.run.remote(role, method, rank_args, kwargs)
                for actor, rank_args in zip(actors, split.args_per_rank, strict=False)  # a rank may get none
            ]
            result = gather_results(self.world.results(futures, method), split)
            if isinstance(result, dict):
                result = result | {"rank_token_ratio": split.token_ratio}
            return result
        return self.world.results([actor.run.remote(role, method, args, kwargs) for actor in actors], method)[0]

    def shutdown(self) -> None:
        """Roles share their actors: the first group shut down stops the world."""
        self.world.shutdown()


def _failure(future) -> Exception | None:
    """The error a finished call raised; None if it succeeded or is still running."""
    try:
        ray.get(future, timeout=0)
    except (RayTaskError, RayActorError) as error:
        return error
    except GetTimeoutError:
        pass
    return None
