"""Write the run report: one HTML file with its script, style and data inline, so that it opens from disk or
from any static server with no network."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from datetime import datetime
from html import escape
from pathlib import Path

from ascent.report.data import (
    MAX_ROLLOUT_STEPS,
    MAX_SAMPLES_PER_STEP,
    chart_specs,
    read_metrics,
    read_rollouts,
    run_summary,
)

logger = logging.getLogger(__name__)

REPORT_FILE = "report.html"
_ASSETS = Path(__file__).parent

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ascent report: @TITLE@</title>
<link rel="icon" href="data:,">
<style>
@STYLE@</style>
</head>
<body>
<header id="run"></header>
<noscript><p>This report draws its charts and samples with JavaScript; allow scripts for this file.</p></noscript>
<main>
<h2>Metrics</h2>
<div id="charts" class="charts"></div>
<h2>Rollouts</h2>
<div id="rollouts"></div>
</main>
<script type="application/json" id="report-data">@DATA@</script>
<script>
@SCRIPT@</script>
</body>
</html>
"""


def write_report(
    run_dir: str | Path,
    out_path: str | Path | None = None,
    max_samples_per_step: int = MAX_SAMPLES_PER_STEP,
    max_rollout_steps: int = MAX_ROLLOUT_STEPS,
) -> Path:
    """Write the report of the run in `run_dir` to `out_path` (default `<run_dir>/report.html`); return its path.
    Each step's rollouts are capped at `max_samples_per_step` samples and `max_rollout_steps` steps (the page
    says when it holds fewer than the run wrote)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run directory at {run_dir}: give the trainer.output_dir of a run")
    if max_samples_per_step < 1 or max_rollout_steps < 1:
        raise ValueError("max_samples_per_step and max_rollout_steps must be at least 1")
    data = report_data(run_dir, max_samples_per_step, max_rollout_steps)
    out = Path(out_path) if out_path is not None else run_dir / REPORT_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    # A page being served is never seen half-written; two writers (a run ending, `ascent view`) never share a file.
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=out.parent, prefix=f".{out.name}.", delete=False) as f:
        f.write(render_page(data))
    os.replace(f.name, out)
    return out


def write_report_or_warn(run_dir: str | Path) -> Path | None:
    """`write_report` for the end of a training run: a failure is logged with its traceback, never raised, so a
    report cannot fail a finished run."""
    try:
        path = write_report(run_dir)
    except Exception:
        logger.warning("could not write the run report of %s", run_dir, exc_info=True)
        return None
    logger.info("report %s (view it: ascent view %s)", path, run_dir)
    return path


def report_data(run_dir: Path, max_samples_per_step: int, max_rollout_steps: int) -> dict:
    metrics = read_metrics(run_dir / "metrics.jsonl")
    return {
        "run": run_summary(run_dir),
        "generated": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "metrics": metrics,
        "charts": chart_specs(list(metrics["series"])),
        "rollouts": read_rollouts(run_dir, max_samples_per_step, max_rollout_steps),
        "max_samples_per_step": max_samples_per_step,
        "max_rollout_steps": max_rollout_steps,
    }


def render_page(data: dict) -> str:
    script = (_ASSETS / "report.js").read_text(encoding="utf-8")
    style = (_ASSETS / "report.css").read_text(encoding="utf-8")
    assert "</" not in script and "</" not in style, "an inline script or style may not contain '</'"
    page = _PAGE.replace("@TITLE@", escape(data["run"]["name"])).replace("@STYLE@", style)
    # The data go in last: no marker text inside them can be replaced by mistake.
    return page.replace("@SCRIPT@", script).replace("@DATA@", embed_json(data))


def embed_json(data: dict) -> str:
    """JSON for a <script type="application/json"> block. Every "<" is written as the escape \\u003c, so no text in
    it (a response that says "</script>" or "<!--") can end the block; JSON.parse reads the same strings back."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")
