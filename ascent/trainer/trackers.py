"""Experiment trackers (`trainer.loggers`): TensorBoard, Weights & Biases, MLflow, each behind one small interface.

Console and `metrics.jsonl` are always on (`tracking.MetricsLogger`); these get the same metrics at the same steps.
Each library is imported only when its tracker is asked for. A resumed run continues the trackers at the resumed
step: TensorBoard hides the events after it (`purge_step`); W&B and MLflow reuse the run ids kept in
`<run_dir>/trackers.json`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Protocol

from ascent.config import Config

STATE_FILE = "trackers.json"  # the W&B and MLflow run ids, so that a resumed run continues the same runs


class Tracker(Protocol):
    def log_config(self, config: dict[str, Any]) -> None: ...

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self, failed: bool = False) -> None: ...


def _require(module: str, tracker: str):
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"trainer.loggers=[{tracker}] needs the {module.split('.')[0]} package: "
            f"pip install 'ascent[tracking]' (or drop {tracker} from trainer.loggers)."
        ) from error


class TensorBoardTracker:
    """Scalars in `<run_dir>/tensorboard/` (`tensorboard --logdir <run_dir>/tensorboard`)."""

    def __init__(self, run_dir: Path, config: Config, state: dict[str, Any], resumed_step: int) -> None:
        _require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        # Events from a previous attempt at the steps about to be rerun (or, on a fresh start, all of them) are
        # hidden from TensorBoard: it drops those at or after `purge_step` that were written before this one.
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resumed_step + 1 if resumed_step else 0)

    def log_config(self, config: dict[str, Any]) -> None:
        text = json.dumps(config, indent=2)
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)  # a code block

    def log(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()  # a killed run keeps every step it logged

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run named after the run directory, in project `trainer.project`. The mode comes from WANDB_MODE
    (`offline` writes `<run_dir>/wandb/offline-run-*`; `wandb sync` uploads it later), files go under the run
    directory unless WANDB_DIR says otherwise."""

    def __init__(self, run_dir: Path, config: Config, state: dict[str, Any], resumed_step: int) -> None:
        wandb = _require("wandb", "wandb")
        run_id = state.get("wandb_run_id") if resumed_step else None
        self.run = wandb.init(
            project=config.trainer.project,
            name=run_dir.name,
            dir=os.environ.get("WANDB_DIR") or str(run_dir),
            id=run_id,
            resume="allow" if run_id else None,
            # ascent keeps its own train.log (W&B's console capture would wrap stdout and stderr) and console lines
            settings=wandb.Settings(console="off", quiet=True),
        )
        state["wandb_run_id"] = self.run.id

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class MLflowTracker:
    """An MLflow run named after the run directory, in experiment `trainer.project`, at `trainer.mlflow_tracking_uri`
    (default: $MLFLOW_TRACKING_URI, else a SQLite store `<run_dir>/mlflow.db`; `mlflow ui --backend-store-uri
    sqlite:///<run_dir>/mlflow.db` shows it). Only MLflow's client is used, never its global active run."""

    def __init__(self, run_dir: Path, config: Config, state: dict[str, Any], resumed_step: int) -> None:
        tracking = _require("mlflow.tracking", "mlflow")
        self.entities = _require("mlflow.entities", "mlflow")
        uri = tracking_uri(config, run_dir)
        self.client = tracking.MlflowClient(uri)
        run_id = state.get("mlflow_run_id") if resumed_step and state.get("mlflow_tracking_uri") == uri else None
        if run_id is None:
            # with the default store the artifacts stay in the run directory too; a server chooses its own place
            artifacts = run_dir / "mlflow-artifacts" if uri == _default_uri(run_dir) else None
            run_id = self._create_run(run_dir, config.trainer.project, artifacts)
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id
        state["mlflow_run_id"], state["mlflow_tracking_uri"] = run_id, uri

    def _create_run(self, run_dir: Path, experiment_name: str, artifacts: Path | None) -> str:
        experiment = self.client.get_experiment_by_name(experiment_name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            location = artifacts.resolve().as_uri() if artifacts else None
            experiment_id = self.client.create_experiment(experiment_name, artifact_location=location)
        tags = {"ascent.run_dir": str(run_dir.resolve())}
        return self.client.create_run(experiment_id, run_name=run_dir.name, tags=tags).info.run_id

    def log_config(self, config: dict[str, Any]) -> None:
        params = [self.entities.Param(key, str(value)[:6000]) for key, value in _flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        entries = [self.entities.Metric(mlflow_key(name), float(value), now, step) for name, value in metrics.items()]
        for start in range(0, len(entries), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=entries[start : start + 1000])

    def close(self, failed: bool = False) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


TRACKERS: dict[str, type] = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MLflowTracker}


def tracking_uri(config: Config, run_dir: Path) -> str:
    """Where the MLflow tracker writes: trainer.mlflow_tracking_uri, else $MLFLOW_TRACKING_URI, else a SQLite file
    in the run directory (MLflow 3 refuses its old `./mlruns` file store without MLFLOW_ALLOW_FILE_STORE=true)."""
    return config.trainer.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or _default_uri(run_dir)


def _default_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"


def mlflow_key(name: str) -> str:
    """MLflow accepts letters, digits, `_ - . / :` and spaces in metric names; reward components may have more."""
    return re.sub(r"[^\w\-./: ]", "_", name)


def build_trackers(config: Config, run_dir: Path, resumed_step: int = 0) -> list[Tracker]:
    """The trackers `trainer.loggers` names, started; the config logged once per run by each tracker (on resume,
    only by a tracker the run did not have before)."""
    path = run_dir / STATE_FILE
    state = json.loads(path.read_text()) if path.exists() else {}
    if not resumed_step:
        state["configured"] = []
    trackers: list[Tracker] = []
    try:
        for name in config.trainer.loggers:
            trackers.append(TRACKERS[name](run_dir, config, state, resumed_step))
            if name not in state.setdefault("configured", []):
                trackers[-1].log_config(dataclasses.asdict(config))
                state["configured"].append(name)
    except BaseException:
        for tracker in trackers:
            tracker.close(failed=True)
        raise
    if trackers:
        temporary = path.with_name(f".{STATE_FILE}.tmp")
        temporary.write_text(json.dumps(state, indent=2) + "\n")
        temporary.replace(path)
    return trackers


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[prefix + key] = value
    return flat
