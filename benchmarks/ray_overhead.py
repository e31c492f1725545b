"""What the Ray backend costs: the demo's GRPO step with 2 Ray workers against local mode, equal global batch.

    .venv/bin/python benchmarks/ray_overhead.py              # 2 rounds of 12 steps per mode (about 4 minutes)
    .venv/bin/python benchmarks/ray_overhead.py --steps 30 --rounds 3

Every run uses examples/demo.yaml (64 prompts x 8 samples, two optimizer updates per step) on the demo's
model shape (`tiny:llama`, randomly initialised: the speed does not depend on the weights), without
validation, in local mode and with 2 Ray workers. The modes take turns for `--rounds` rounds, so that a
slow spell of this shared machine hits both; medians pool the rounds and skip each run's first 2 steps
(warm-up). Local mode gives torch both cores in one process; each Ray worker gets one core. The last line
is the ratio of median step times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("rollout", "score", "logprobs", "update", "sync_weights")


MODES = {"local": [], "ray2": ["trainer.backend=ray", "trainer.num_workers=2"]}


def run(mode: str, steps: int, run_dir: Path) -> list[dict]:
    subprocess.run(
        [
            str(Path(sys.executable).with_name("ascent")), "train", "examples/demo.yaml", "model.path=tiny:llama",
            f"trainer.steps={steps}", "data.synthetic.num_val=0", "trainer.save_final_model=false",
            "trainer.progress_bar=false", f"trainer.output_dir={run_dir}", *MODES[mode],
        ],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if entry["step"] > 2]


def median(entries: list[dict], name: str) -> float:
    return statistics.median(entry.get(name, 0.0) for entry in entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    arguments = parser.parse_args()
    steps = arguments.steps
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as scratch:
        for round_number in range(arguments.rounds):
            for mode in MODES:
                results[mode] += run(mode, steps, Path(scratch) / f"{mode}-{round_number}")
    print(f"median seconds per step, steps 3..{steps} of {arguments.rounds} runs per mode (512 samples per step)")
    print(f"  {'mode':<8}{'step':>8}" + "".join(f"{stage:>14}" for stage in STAGES))
    for mode, entries in results.items():
        stages = "".join(f"{median(entries, f'timing/{stage}'):>14.3f}" for stage in STAGES)
        print(f"  {mode:<8}{median(entries, 'timing/step'):>8.3f}{stages}")
    ray2 = results["ray2"]
    sync_share = statistics.median(entry["timing/sync_weights"] / entry["timing/step"] for entry in ray2)
    print(f"ray2 sync_weights share of the step: {sync_share:.1%}")
    print(f"ray2 rank token ratio (max/min tokens per rank), median: {median(ray2, 'policy/rank_token_ratio'):.3f}")
    print(f"step time ray2/local: {median(ray2, 'timing/step') / median(results['local'], 'timing/step'):.2f}")


if __name__ == "__main__":
    main()
