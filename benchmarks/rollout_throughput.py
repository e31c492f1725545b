"""Rollout throughput of each engine, side by side: generated tokens per second.

    .venv/bin/python benchmarks/rollout_throughput.py            # demo model and the 25M model
    .venv/bin/python benchmarks/rollout_throughput.py --quick    # demo model only
    .venv-vllm/bin/python benchmarks/rollout_throughput.py       # vLLM too (`make test-vllm` builds that venv)

Batch: 64 prompts (the demo's two-digit additions) x 8 samples, 128 response tokens, temperature 1.0,
seeded. The models are randomly initialised presets (`tiny:llama`, the demo's shape, 1M parameters;
`tiny:llama-25m`), which almost never emit EOS, so every row decodes all 128 tokens: the figure is raw
decode speed. Each engine runs once to warm up, then the median of `--repeats` timed runs is reported.
The last line is the speedup on the demo model.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ascent.models.builders import build_model
from ascent.models.tokenizers import build_char_tokenizer
from ascent.rollout.engine import ROLLOUT_ENGINES
from ascent.rollout.trajectories import SamplingParams

SAMPLING = SamplingParams(max_tokens=128, temperature=1.0, samples_per_prompt=8, seed=0)


def tokens_per_second(engine, prompts: list[list[int]], repeats: int) -> float:
    engine.generate(prompts[:4], SamplingParams(max_tokens=8, temperature=1.0, samples_per_prompt=2))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        batch = engine.generate(prompts, SAMPLING)
        rates.append(float(batch.response_mask.sum()) / (time.perf_counter() - start))
    return statistics.median(rates)


def engines(model, tokenizer, skipped: set[str]):
    """(name, engine) for every engine this environment can run: vLLM only where it is installed."""
    for name, engine_class in ROLLOUT_ENGINES.items():
        if name in skipped:
            continue
        try:
            yield name, engine_class(model, tokenizer)
        except ImportError as error:
            print(f"  ({name} skipped: {str(error).splitlines()[0]})")
            skipped.add(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the demo model only")
    parser.add_argument("--repeats", type=int, default=1)
    arguments = parser.parse_args()
    tokenizer = build_char_tokenizer()
    questions = [f"{a}+{99 - a}=" for a in range(10, 74)]
    prompts = [tokenizer(question, add_special_tokens=False)["input_ids"] for question in questions]
    models = ["tiny:llama"] if arguments.quick else ["tiny:llama", "tiny:llama-25m"]
    print(f"generated tokens/s, 64 prompts x 8 samples x 128 tokens, {torch.get_num_threads()} threads")
    header = f"  {'model':<16}{'params':>8}"
    speedups, skipped = {}, set()
    for path in models:
        model = build_model(path, tokenizer, "float32", seed=0).eval()
        running = engines(model, tokenizer, skipped)
        rates = {name: tokens_per_second(engine, prompts, arguments.repeats) for name, engine in running}
        speedups[path] = rates["native"] / rates["hf"]
        params = sum(p.numel() for p in model.parameters()) / 1e6
        if header:
            print(header + "".join(f"{name:>12}" for name in rates) + f"{'native/hf':>12}")
            header = ""
        cells = "".join(f"{rate:>12.0f}" for rate in rates.values())
        print(f"  {path:<16}{params:>7.1f}M{cells}{speedups[path]:>12.2f}")
    print(f"speedup native/hf: {speedups['tiny:llama']:.2f}")


if __name__ == "__main__":
    main()
