"""Run directory, metrics to the console and `metrics.jsonl`, a progress bar with ETA, stage timers."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from tqdm import tqdm

from ascent.config import Config, to_yaml
from ascent.trainer.trackers import Tracker

logger = logging.getLogger("ascent")

# What the console line shows, in order, when present: (metric, label, format).
CONSOLE_METRICS = [
    ("reward/mean", "reward", "{:.3f}"),
    ("reward/accuracy", "acc", "{:.3f}"),
    ("val/accuracy", "val_acc", "{:.3f}"),
    ("sft/nll", "nll", "{:.4f}"),
    ("val/nll", "val_nll", "{:.4f}"),
    ("response_length/mean", "len", "{:.1f}"),
    ("policy/entropy", "entropy", "{:.3f}"),
    ("policy/kl_ref", "kl", "{:.4f}"),
    ("policy/clip_frac_high", "clip_hi", "{:.3f}"),
    ("policy/grad_norm", "grad", "{:.3f}"),
    ("reward/errors", "reward_errors", "{:.0f}"),
    ("timing/step", "s/step", "{:.2f}"),
]


def prepare_run_dir(config: Config, kind: str) -> Path:
    """Create the run directory (default runs/<run_name>-<time>), save the resolved config, log to a file.
    The saved config names the directory, so `ascent train <run_dir>/config.yaml` continues this run."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.trainer.output_dir or f"runs/{config.trainer.run_name}-{kind}-{stamp}")
    config.trainer.output_dir = str(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(to_yaml(config))
    configure_logging(run_dir / "train.log")
    return run_dir


def configure_logging(log_file: Path | None = None) -> None:
    root = logging.getLogger()
    if not any(getattr(handler, "_ascent", False) for handler in root.handlers):
        console = logging.StreamHandler()
        console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
        console._ascent = True
        root.addHandler(console)
        root.setLevel(logging.INFO)
    if log_file is not None:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)


class MetricsLogger:
    """One JSON line per step in `metrics.jsonl`, one short line per step on the console, and the same metrics to
    each of `trackers` (TensorBoard, W&B, MLflow: `trackers.build_trackers`), which it closes.

    A fresh run starts the file afresh. A run resumed after step `resumed_step` keeps the lines up to that
    step (`kept`) and drops later ones, which the resumed run writes again. As a context manager it closes
    everything on the way out, telling the trackers whether the run failed."""

    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        progress_bar: bool = True,
        resumed_step: int = 0,
        trackers: Sequence[Tracker] = (),
    ) -> None:
        self.trackers = list(trackers)
        path = run_dir / "metrics.jsonl"
        self.kept: list[dict] = []
        if resumed_step and path.exists():
            entries = [_parse(line) for line in path.read_text().splitlines()]  # a kill may have cut the last line
            self.kept = [entry for entry in entries if entry is not None and entry["step"] <= resumed_step]
            rewritten = path.with_name(".metrics.jsonl.tmp")
            rewritten.write_text("".join(json.dumps(entry) + "\n" for entry in self.kept))
            rewritten.replace(path)
        self.file = path.open("a" if resumed_step else "w")
        self.total_steps, self.first_step = total_steps, resumed_step
        self.start = time.perf_counter()
        # The bar redraws in place on a terminal; in a log file the per-step line (with its ETA) is enough.
        self.bar = tqdm(
            total=total_steps,
            initial=resumed_step,
            unit="step",
            dynamic_ncols=True,
            disable=not (progress_bar and sys.stderr.isatty()),
        )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {name: _jsonable(value) for name, value in sorted(metrics.items())}
        self.file.write(json.dumps({"step": step, **clean}) + "\n")
        self.file.flush()
        finite = {name: value for name, value in clean.items() if value is not None}
        for tracker in list(self.trackers):
            try:
                tracker.log(finite, step)
            except Exception:  # metrics.jsonl has the line: a tracker's outage must not end a long run
                logger.exception("%s failed to log step %d; it is switched off for the rest of the run",
                                 type(tracker).__name__, step)  # fmt: skip
                self.trackers.remove(tracker)
        parts = [f"{label} {fmt.format(metrics[name])}" for name, label, fmt in CONSOLE_METRICS if name in metrics]
        if step > self.first_step:
            remaining = (time.perf_counter() - self.start) / (step - self.first_step) * (self.total_steps - step)
            parts.append(f"eta {int(remaining) // 60}:{int(remaining) % 60:02d}")
        self.bar.write(f"step {step:>4} | " + " | ".join(parts))
        if step > self.first_step:
            self.bar.update(1)

    def close(self, failed: bool = False) -> None:
        self.bar.close()
        self.file.close()
        trackers, self.trackers = self.trackers, []  # closing twice is harmless
        for tracker in trackers:
            try:
                tracker.close(failed)
            except Exception:  # the others still close
                logger.exception("%s failed to close", type(tracker).__name__)

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        self.close(failed=error_type is not None)


def _parse(line: str) -> dict | None:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _jsonable(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        key = f"timing/{name}"  # a stage timed twice in one step (e.g. rollout rounds) adds up
        timings[key] = timings.get(key, 0.0) + time.perf_counter() - start
