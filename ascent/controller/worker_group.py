"""WorkerGroup: how the trainer talks to workers, whether they live in this process or elsewhere.

The controller calls `group.call("method", batch, ...)`; the group splits the batch over its
data-parallel ranks, runs the method on each worker and gathers the results in rank order. The trainer
loop only sees this interface, so the same loop drives in-process workers and Ray actors
(`ray_group.py`).
"""

from __future__ import annotations

from typing import Any, Protocol


class WorkerError(RuntimeError):
    """A worker failed; the message names its rank and carries its original traceback."""


class WorkerGroup(Protocol):
    world_size: int

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def shutdown(self) -> None: ...


class LocalWorkerGroup:
    """One worker in this process: no split, no gather; the call is a plain method call."""

    world_size = 1

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker, method)(*args, **kwargs)

    def shutdown(self) -> None:
        """Nothing to release: the worker lives and dies with this process."""
