"""Checkpoints of an RL run: one directory per saved step, written atomically, loadable in any run mode.

    <run_dir>/checkpoints/step_000012/
        policy/ critic/        each role's model, optimizer, lr schedule (torch.distributed.checkpoint: every
                               rank writes its shards; any number of ranks, or one process, reads them back)
        trainer_state.json     step, data-sampler position, controller coefficients, best checkpoint so far
        controller_rng.pt      the controller's python, numpy and torch RNG states
        config.yaml            the resolved config of the run that wrote it
        manifest.json          size and SHA-256 of every file above, written last
    <run_dir>/checkpoints/best.json   with trainer.keep_best: the step, metric and value of the best one

A checkpoint is written under a temporary name, synced to disk, then renamed: a directory named `step_N`
is always complete, and a crash mid-save leaves the previous ones intact. Resuming checks the manifest, so
a checkpoint damaged later (a partial copy, a full disk) is refused by name, and `resume=auto` falls back
to the newest one that is intact. With Ray on several nodes the run directory must be on a filesystem
every node sees.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from ascent.config import Config, ConfigError, to_yaml
from ascent.controller.worker_group import WorkerGroup

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"step_(\d+)")

# Keys a resumed run may change: how long and where it runs, not what it computes.
RESUMABLE_CHANGES = {
    "trainer.steps", "trainer.resume", "trainer.save_every", "trainer.keep_last", "trainer.output_dir",
    "trainer.keep_best", "trainer.keep_best_mode", "trainer.save_optimizer", "trainer.loggers", "trainer.project",
    "trainer.mlflow_tracking_uri", "trainer.log_rollouts_every", "trainer.log_rollouts_max",
    "trainer.run_name", "trainer.progress_bar", "trainer.val_every", "trainer.val_max_prompts",
    "trainer.save_final_model", "trainer.device", "trainer.backend", "trainer.num_workers", "trainer.nnodes",
    "trainer.gpus_per_node", "trainer.worker_timeout_s", "trainer.weight_sync_bucket_mb", "ray.address",
    "optim.micro_batch_size", "fsdp.reshard_after_forward", "fsdp.cpu_offload",
}  # fmt: skip


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step_{step:06d}"


def saved_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoint directories of a run, oldest first. Temporary directories of an unfinished save do not
    match `step_N` and are ignored."""
    found = [path for path in (run_dir / CHECKPOINTS).glob("step_*") if _STEP_DIR.fullmatch(path.name)]
    return sorted(found, key=lambda path: int(path.name[5:]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint whose files match its manifest, or None; damaged ones are skipped with a warning."""
    for path in reversed(saved_checkpoints(run_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        logger.warning("skipping checkpoint %s: %s", path, problem)
    return None


def checkpoint_problem(path: Path) -> str | None:
    """What is wrong with the checkpoint at `path` (a missing, extra or changed file), or None if its files are
    exactly those its manifest lists."""
    manifest_file = path / MANIFEST
    if not manifest_file.is_file():
        return f"it has no {MANIFEST} (it was not written by a complete save)"
    try:
        expected = json.loads(manifest_file.read_text())["files"]
    except (ValueError, KeyError) as error:
        return f"its {MANIFEST} is unreadable ({error})"
    found = _file_digests(path)
    for name in sorted(expected.keys() | found.keys()):
        if name not in found:
            return f"{name} is missing"
        if name not in expected:
            return f"{name} is not in its manifest"
        if found[name] != expected[name]:
            return f"{name} differs from its manifest (size or SHA-256)"
    return None


def resume_point(config: Config, run_dir: Path) -> Path | None:
    """The checkpoint `trainer.resume` names: `auto` the latest in this run directory (None when there is
    none), `never` None, otherwise a checkpoint directory that must exist. A fresh run (`never`) refuses a
    directory that holds checkpoints: its own would mix with them (and `keep_last` would delete its own)."""
    resume = config.trainer.resume
    if resume == "never":
        if saved_checkpoints(run_dir):
            raise ConfigError(
                f"trainer.resume=never, but {run_dir / CHECKPOINTS} holds another run's checkpoints. "
                "Choose another trainer.output_dir, or delete that directory."
            )
        return None
    if resume == "auto":
        latest = latest_checkpoint(run_dir)
        if latest is None and saved_checkpoints(run_dir):
            raise ConfigError(
                f"trainer.resume=auto: every checkpoint in {run_dir / CHECKPOINTS} is damaged (see the warnings "
                "above). Name one with trainer.resume=PATH, or start over with another trainer.output_dir."
            )
        return latest
    path = Path(resume)
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(f"trainer.resume={resume!r} is not a checkpoint directory (no trainer_state.json in it).")
    problem = checkpoint_problem(path)
    if problem is not None:
        raise ConfigError(f"trainer.resume={resume!r} is damaged: {problem}. Resume from another checkpoint.")
    return path


def save_checkpoint(
    run_dir: Path,
    step: int,
    groups: dict[str, WorkerGroup],
    trainer_state: dict[str, Any],
    config: Config,
    best_step: int | None = None,
) -> Path:
    """Write step `step`'s checkpoint atomically, then delete all but the newest `trainer.keep_last` (and
    `best_step`'s, the best by `trainer.keep_best`)."""
    final = checkpoint_dir(run_dir, step)
    temporary = final.with_name(f".tmp-{final.name}")
    shutil.rmtree(temporary, ignore_errors=True)  # left by a save that crashed
    temporary.mkdir(parents=True)
    for role, group in groups.items():
        group.call("save_checkpoint", temporary / role)
    (temporary / "trainer_state.json").write_text(json.dumps({"step": step, **trainer_state}, indent=1))
    torch.save(
        {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
        temporary / "controller_rng.pt",
    )
    (temporary / "config.yaml").write_text(to_yaml(config))
    manifest = {"step": step, "files": _file_digests(temporary)}
    (temporary / MANIFEST).write_text(json.dumps(manifest, indent=1))
    _fsync_tree(temporary)
    replaced = final.with_name(f".old-{final.name}")
    if final.exists():  # the same step saved again: keep the old one until the new one is in place
        shutil.rmtree(replaced, ignore_errors=True)
        final.rename(replaced)
    os.replace(temporary, final)
    _fsync(final.parent)
    shutil.rmtree(replaced, ignore_errors=True)
    _delete_old(run_dir, config.trainer.keep_last, keep={best_step})
    return final


def better(value: float, best: float | None, mode: str) -> bool:
    """Whether `value` of the keep-best metric beats `best` (None: nothing yet); NaN never does."""
    if value != value:
        return False
    return best is None or (value > best if mode == "max" else value < best)


def write_best(run_dir: Path, step: int, metric: str, value: float) -> None:
    """Record the best checkpoint in <run_dir>/checkpoints/best.json (atomically)."""
    path = run_dir / CHECKPOINTS / "best.json"
    temporary = path.with_name(".best.json.tmp")
    record = {"step": step, "metric": metric, "value": value, "path": str(checkpoint_dir(run_dir, step))}
    temporary.write_text(json.dumps(record, indent=1))
    os.replace(temporary, path)


def load_checkpoint(path: Path, groups: dict[str, WorkerGroup], config: Config) -> dict[str, Any]:
    """Restore every role's workers and the controller's RNG from `path`; returns the trainer state (with
    `step`). Refuses a config that changes what the run computes, naming the keys."""
    check_resumable(yaml.safe_load((path / "config.yaml").read_text()), config, path)
    for role, group in groups.items():
        if not (path / role).is_dir():
            raise ConfigError(f"checkpoint {path} has no {role!r} state; was it written by another algorithm?")
        group.call("load_checkpoint", path / role)
    rng = torch.load(path / "controller_rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    return json.loads((path / "trainer_state.json").read_text())


def check_resumable(saved: dict[str, Any], config: Config, path: Path) -> None:
    now = _flatten(yaml.safe_load(to_yaml(config)))
    before = _flatten(saved)
    changed = sorted(key for key in now.keys() | before.keys() if now.get(key) != before.get(key))
    refused = [key for key in changed if key not in RESUMABLE_CHANGES]
    if refused:
        lines = "\n".join(f"  {key}: {before.get(key)!r} in the checkpoint, {now.get(key)!r} now" for key in refused)
        raise ConfigError(
            f"cannot resume from {path}: the config differs in keys that change what the run computes:\n{lines}\n"
            "Put them back, or start a new run in another trainer.output_dir."
        )
    if "trainer.steps" in changed and now["optim.lr_schedule"] != "constant":
        logger.warning(
            "trainer.steps changed from %s to %s: the %s lr schedule decays over the new length, so the lr of "
            "every step from here on differs from the original run's",
            before.get("trainer.steps"),
            now["trainer.steps"],
            now["optim.lr_schedule"],
        )


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _delete_old(run_dir: Path, keep_last: int, keep: set[int | None]) -> None:
    if keep_last <= 0:
        return
    for path in saved_checkpoints(run_dir)[:-keep_last]:
        if int(path.name[5:]) not in keep:
            shutil.rmtree(path)


def _file_digests(root: Path) -> dict[str, dict[str, Any]]:
    """{relative path: {bytes, sha256}} of every file under `root` except the manifest."""
    digests = {}
    for file in sorted(root.rglob("*")):
        if file.is_file() and file.name != MANIFEST:
            digest = hashlib.sha256()
            with file.open("rb") as stream:
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
            digests[str(file.relative_to(root))] = {"bytes": file.stat().st_size, "sha256": digest.hexdigest()}
    return digests


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            _fsync(Path(directory) / name)
        _fsync(Path(directory))


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
