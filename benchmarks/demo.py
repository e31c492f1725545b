"""Figures of the embedded demo: wall time per stage, held-out accuracy before/after GRPO, step time.

    .venv/bin/python benchmarks/demo.py            # runs both demo stages (what `make demo` runs), then reports
    .venv/bin/python benchmarks/demo.py --report   # only reads runs/demo-sft and runs/demo-rl

Run it on an otherwise idle machine: the numbers are wall-clock seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = [("sft", "examples/demo_sft.yaml", "runs/demo-sft"), ("train", "examples/demo.yaml", "runs/demo-rl")]


def run_stage(command: str, config: str) -> float:
    ascent = Path(sys.executable).with_name("ascent")
    start = time.perf_counter()
    subprocess.run([str(ascent), command, config, "trainer.progress_bar=false"], cwd=ROOT, check=True)
    return time.perf_counter() - start


def read_metrics(run_dir: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / run_dir / "metrics.jsonl").read_text().splitlines()]


def report(wall_times: dict[str, float]) -> None:
    sft, rl = read_metrics("runs/demo-sft"), read_metrics("runs/demo-rl")
    validations = [entry for entry in rl if entry.get("val/accuracy") is not None]
    steps = [entry for entry in rl if entry["step"] > 0]
    sft_steps = [entry for entry in sft if entry["step"] > 0]
    print("demo figures")
    for name, seconds in wall_times.items():
        print(f"  wall time {name:<24} {seconds:8.1f} s")
    print(f"  accuracy before SFT (random model)  {sft[0]['val/accuracy']:.3f}")
    print(f"  accuracy after SFT = before GRPO    {validations[0]['val/accuracy']:.3f}")
    print(f"  accuracy after GRPO                 {validations[-1]['val/accuracy']:.3f}")
    print(f"  best accuracy during GRPO           {max(v['val/accuracy'] for v in validations):.3f}")
    print(
        f"  GRPO train reward first/last 10     {statistics.fmean(e['reward/mean'] for e in steps[:10]):.3f}"
        f" -> {statistics.fmean(e['reward/mean'] for e in steps[-10:]):.3f}"
    )
    print(f"  GRPO step time (median)             {statistics.median(e['timing/step'] for e in steps):.3f} s")
    for stage in ("rollout", "score", "logprobs", "update", "sync_weights"):
        print(f"    {stage:<32}  {statistics.median(e['timing/' + stage] for e in steps):.3f} s")
    print(f"  SFT step time (median)              {statistics.median(e['timing/step'] for e in sft_steps):.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", action="store_true", help="only read existing run directories")
    arguments = parser.parse_args()
    wall_times = {}
    if not arguments.report:
        for command, config, _ in STAGES:
            wall_times[f"{command} ({config})"] = run_stage(command, config)
    report(wall_times)


if __name__ == "__main__":
    main()
