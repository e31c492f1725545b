"""torch.distributed helpers for workers that form one data-parallel world (Ray actors, or torchrun).

Free functions, so a worker's distributed set-up reads top to bottom: shard the model with FSDP2,
sum a metric over ranks, gather full weights for the rollout engine in buckets, save and load the
training state in a layout that any number of ranks can read.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from ascent.config.schema import FSDPConfig

logger = logging.getLogger(__name__)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def shard_model(model: torch.nn.Module, config: FSDPConfig, device: torch.device) -> torch.nn.Module:
    """FSDP2: `fully_shard` each transformer block (the classes in the model's `_no_split_modules`), then
    the root, over all ranks. Each block's parameters are gathered for its forward and freed after
    (`config.reshard_after_forward`). Layers compute in `config.param_dtype` (auto: bfloat16 on GPU) while
    gradients are reduced and parameters kept in float32."""
    param_dtype = {"auto": torch.bfloat16 if device.type == "cuda" else None, "float32": None}.get(
        config.param_dtype, torch.bfloat16
    )
    options = {
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None),
        "reshard_after_forward": config.reshard_after_forward,
    }
    if config.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    block_classes = {name for module in model.modules() for name in getattr(module, "_no_split_modules", None) or []}
    blocks = [module for module in model.modules() if type(module).__name__ in block_classes]
    if not blocks:
        raise ValueError(f"{type(model).__name__} names no transformer block class in _no_split_modules to shard")
    for block in blocks:
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer unsharded, on the CPU. A collective when the model is sharded: every rank
    must call it."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def all_reduce_sum(values: dict[str, float]) -> dict[str, float]:
    """Sum every value over the ranks (one collective for the whole dict; keys must match on all ranks)."""
    if world_size() == 1 or not values:
        return values
    names = sorted(values)
    tensor = torch.tensor([float(values[name]) for name in names], dtype=torch.float64)
    dist.all_reduce(tensor)
    return dict(zip(names, tensor.tolist(), strict=True))


def full_parameters_in_buckets(model: torch.nn.Module, bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """The full (unsharded) parameters, a bucket of about `bucket_bytes` at a time. A sharded model is first
    gathered whole: one all-gather per FSDP block rather than one per parameter, in the layers' compute dtype
    (the weights as the trained forward sees them); peak memory is one more full copy of the weights. The
    shards are restored when the iteration ends. Every rank must iterate to the end: the gathers are
    collectives."""
    sharded = [module for module in model.modules() if isinstance(module, FSDPModule)]
    for handle in [module.unshard(async_op=True) for module in sharded]:
        if handle is not None:
            handle.wait()
    try:
        bucket, size = [], 0
        for name, parameter in model.named_parameters():
            bucket.append((name, parameter.detach()))
            size += parameter.numel() * parameter.element_size()
            if size >= bucket_bytes:
                yield bucket
                bucket, size = [], 0
        if bucket:
            yield bucket
    finally:
        for module in sharded:
            module.reshard()


def save_training_state(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    extra: dict,
    rank_state: dict | None = None,
) -> None:
    """Model and optimizer (None: the model only) with torch.distributed.checkpoint (each rank writes its shards;
    a plain module writes whole tensors), plus `extra` (scheduler, counters: the same on every rank) from rank 0,
    and each rank's RNG state with its own `rank_state` (e.g. a random stream of its own). The files load into
    any number of ranks, sharded or not (`load_training_state`)."""
    with _single_process_is_intended():
        dcp.save(_model_and_optimizer_state(model, optimizer), checkpoint_id=directory, no_dist=world_size() == 1)
    if rank() == 0:
        torch.save({**extra, "optimizer_saved": optimizer is not None}, directory / "worker_state.pt")
    torch.save({"rng": _rng_state(), "rank_state": rank_state or {}}, directory / f"rng_rank{rank()}.pt")


def load_training_state(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Restore what `save_training_state` wrote, resharded to this world; returns `extra` and this rank's
    `rank_state` (empty for a rank that had no counterpart when the checkpoint was written: it keeps its
    RNG state). A checkpoint saved without its optimizer leaves `optimizer` as it is (fresh), with a warning."""
    extra = torch.load(directory / "worker_state.pt", weights_only=False)
    optimizer_saved = extra.pop("optimizer_saved", True)
    if not optimizer_saved and rank() == 0:
        logger.warning("%s holds no optimizer state (trainer.save_optimizer=false): the optimizer starts fresh",
                       directory)  # fmt: skip
    state = _model_and_optimizer_state(model, optimizer if optimizer_saved else None)
    with _single_process_is_intended():
        dcp.load(state, checkpoint_id=directory, no_dist=world_size() == 1)
    set_model_state_dict(model, state["model"])
    if optimizer_saved:
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
    rank_state = {}
    rng_file = directory / f"rng_rank{rank()}.pt"
    if rng_file.exists():
        saved = torch.load(rng_file, weights_only=False)
        _set_rng_state(saved["rng"])
        rank_state = saved["rank_state"]
    return extra, rank_state


def load_model_state(directory: Path, model: torch.nn.Module) -> None:
    """Only the model's weights from what `save_training_state` wrote (e.g. to export them)."""
    state = _model_and_optimizer_state(model, None)
    with _single_process_is_intended():
        dcp.load(state, checkpoint_id=directory, no_dist=world_size() == 1)
    set_model_state_dict(model, state["model"])


@contextlib.contextmanager
def _single_process_is_intended() -> Iterator[None]:
    """Without a process group, torch.distributed.checkpoint warns that it assumes one process: it is right."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _model_and_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    # Keys are parameter names, not optimizer indices, so the layout does not depend on how the model is sharded.
    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    return {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
