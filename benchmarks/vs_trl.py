"""ascent against TRL's GRPOTrainer: the same GRPO step, side by side in one process, median seconds per step.

    .venv/bin/pip install -e ".[bench]"                                # TRL, for this benchmark only
    .venv/bin/python benchmarks/vs_trl.py                               # 2 warm-up + 10 timed steps each side
    .venv/bin/python benchmarks/vs_trl.py --quick                       # 1 warm-up + 3 timed steps: a smoke test
    .venv/bin/python benchmarks/vs_trl.py --model runs/demo-sft/final   # from the demo's SFT warm start

Both sides load the same weights and tokenizer from one directory: by default the demo's model shape
(`tiny:llama`, 1M parameters, seeded random weights, saved to a temporary directory); `--model` takes any
Hugging Face directory, such as the SFT warm start `make demo` trains. The random model ends about half its
samples with EOS before the limit, but every step still decodes to the limit on both sides; its rewards are
all 0, so its advantages and gradients are 0 and its weights never change, but every stage runs in full.

Each step: 16 prompts (the demo's additions such as `37+45=`, plain text, no chat template, the same prompts
in the same steps on both sides) x 8 samples x 64 new tokens at temperature 1.0; the built-in arithmetic
scorer as the reward; group-normalised advantages; the clipped surrogate (0.2 / 0.28) with no KL; the loss
averaged over every response token of the step (ascent `token-mean`, TRL `dapo`); one AdamW update over the
whole batch (lr 2e-4 constant, gradient norm clipped at 1), `--micro-batch` samples per forward/backward.

The sides take turns step by step (TRL's step, then ascent's), so a slow spell of this shared machine hits
both. ascent times a step inside its trainer (`timing/step`); TRL by a callback from `on_step_begin` to
`on_step_end`. The first `--warmup` steps of each side are skipped. "generate+score" is ascent's rollout +
score stages and TRL's `_generate_and_score_completions`; "rest" is the remainder of the step (ascent:
logprobs, update, weight sync; TRL: forward, backward, optimizer). The last line is the ratio of medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ascent.config import Config, load_config
from ascent.data.prompts import render_prompt
from ascent.data.records import PromptRecord
from ascent.data.sampler import PromptSampler
from ascent.models.builders import build_model
from ascent.models.tokenizers import build_char_tokenizer, load_tokenizer
from ascent.rewards.arithmetic import compute_score
from ascent.trainer.rl import RLTrainer

ROOT = Path(__file__).resolve().parent.parent
ASCENT_STAGES = ("rollout", "score", "logprobs", "update", "sync_weights")


def save_random_model(preset: str, directory: Path) -> Path:
    """A `tiny:` preset with seeded random weights, saved with its tokenizer as a Hugging Face directory."""
    tokenizer = build_char_tokenizer()
    model = build_model(preset, tokenizer, "float32", seed=0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def ascent_config(arguments: argparse.Namespace, model_dir: Path, output_dir: Path) -> Config:
    """examples/demo.yaml with the benchmark's batch shape, one update per step and nothing else running."""
    batch = arguments.prompts * arguments.samples
    return load_config(
        [ROOT / "examples/demo.yaml"],
        [
            f"model.path={model_dir}", f"rollout.engine={arguments.engine}", "trainer.device=cpu",
            f"trainer.prompts_per_step={arguments.prompts}", f"rollout.samples_per_prompt={arguments.samples}",
            f"rollout.max_response_tokens={arguments.max_tokens}", "rollout.temperature=1.0",
            f"optim.mini_batch_size={batch}", f"optim.micro_batch_size={arguments.micro_batch}", "optim.epochs=1",
            f"optim.lr={arguments.lr}", "optim.warmup_steps=0", "optim.lr_schedule=constant",
            "algorithm.dual_clip=0", "algorithm.kl.coef=0", "algorithm.loss_aggregation=token-mean",
            "data.synthetic.num_train=5000", "data.synthetic.num_val=0",
            f"trainer.steps={arguments.warmup + arguments.steps}", f"trainer.output_dir={output_dir}",
            "trainer.save_final_model=false", "trainer.progress_bar=false",
        ],
    )  # fmt: skip


def prompts_in_order(trainer: RLTrainer, config: Config, num_steps: int) -> list[PromptRecord]:
    """The records ascent's trainer will draw, step after step: a fresh copy of its sampler replays them."""
    sampler = PromptSampler(len(trainer.data.train), config.data.seed, config.data.shuffle)
    indices = [sampler.next_indices(config.trainer.prompts_per_step) for _ in range(num_steps)]
    return [trainer.data.train[i] for step_indices in indices for i in step_indices]


def ascent_step(trainer: RLTrainer, step: int) -> dict[str, float]:
    """One ascent step: its own stage timings and the number of response tokens generated."""
    metrics = trainer.train_step(step)
    rollout = trainer.config.rollout
    tokens = metrics["response_length/mean"] * trainer.config.trainer.prompts_per_step * rollout.samples_per_prompt
    timings = {name: metrics.get(f"timing/{name}", 0.0) for name in ("step", *ASCENT_STAGES)}
    return timings | {"generate": timings["rollout"] + timings["score"], "tokens": tokens}


def arithmetic_reward(completions: list[str], ground_truth: list[str], data_source: list[str], **_) -> list[float]:
    """ascent's arithmetic scorer as a TRL reward function (dataset columns arrive as keyword lists)."""
    return [
        compute_score(source, completion, truth)["score"]
        for completion, truth, source in zip(completions, ground_truth, data_source, strict=True)
    ]


def trl_dataset(records: list[PromptRecord], tokenizer, config: Config):
    """A plain-text `prompt` column holding exactly the text ascent tokenizes. TRL tokenizes it with
    `tokenizer(text)` (special tokens on) where ascent passes `add_special_tokens=False`: check the ids agree."""
    from datasets import Dataset

    rows = []
    for record in records:
        text = render_prompt(record, tokenizer, apply_chat_template=config.data.apply_chat_template)
        if tokenizer(text)["input_ids"] != record.prompt_token_ids:
            raise ValueError(f"TRL would tokenize {text!r} differently from ascent; the comparison would be unfair.")
        rows.append({"prompt": text, "ground_truth": record.ground_truth, "data_source": record.data_source})
    return Dataset.from_list(rows)


def run_trl(
    arguments: argparse.Namespace, model_dir: Path, tokenizer, dataset, output_dir: Path, after_step: Callable[[], None]
) -> list[dict[str, float]]:
    """TRL's GRPOTrainer on CPU with the same step; per step: wall time, generation+scoring time, response tokens.
    `after_step` runs after each step has been timed (the other side's step)."""
    from huggingface_hub import constants
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    constants.HF_HUB_DISABLE_TELEMETRY = True  # TRL reports each trainer it builds to the Hub

    batch = arguments.prompts * arguments.samples
    if batch % arguments.micro_batch:
        raise ValueError(f"--micro-batch {arguments.micro_batch} must divide the {batch} samples of a step.")
    args = GRPOConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, use_vllm=False, seed=0,
        # One generation of prompts x samples per optimizer step, consumed in micro-batches, reused once.
        per_device_train_batch_size=arguments.micro_batch, gradient_accumulation_steps=batch // arguments.micro_batch,
        num_generations=arguments.samples, num_iterations=1, max_completion_length=arguments.max_tokens,
        temperature=1.0, top_p=1.0, top_k=0,
        beta=0.0, loss_type="dapo", scale_rewards="group", epsilon=0.2, epsilon_high=0.28,
        learning_rate=arguments.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        gradient_checkpointing=False,  # GRPOConfig turns it on by default; ascent's default is off
        max_steps=arguments.warmup + arguments.steps, shuffle_dataset=False,
        logging_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True, log_completions=False,
    )  # fmt: skip

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.steps: list[dict[str, float]] = []
            self.start, self.generate, self.tokens = 0.0, 0.0, 0.0

        def on_step_begin(self, *_, **__) -> None:
            self.start, self.generate, self.tokens = time.perf_counter(), 0.0, 0.0

        def on_step_end(self, *_, **__) -> None:
            seconds = time.perf_counter() - self.start
            self.steps.append({"step": seconds, "generate": self.generate, "tokens": self.tokens})
            after_step()

    timer = StepTimer()
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=arithmetic_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.remove_callback(PrinterCallback)  # its end-of-run summary would count ascent's interleaved steps
    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(inputs):
        first = len(timer.steps) * arguments.prompts
        drawn = [row["prompt"] for row in inputs[:: arguments.samples]]  # each prompt `samples` times in a row
        if drawn != dataset["prompt"][first : first + arguments.prompts]:
            raise RuntimeError("TRL's step drew other prompts than ascent's: check shuffle_dataset and batch sizes.")
        start = time.perf_counter()
        output = generate_and_score(inputs)
        timer.generate += time.perf_counter() - start
        timer.tokens += float(output["completion_mask"].sum())
        return output

    trainer._generate_and_score_completions = timed_generate_and_score
    trainer.train()
    return timer.steps


def median(steps: list[dict[str, float]], name: str) -> float:
    return statistics.median(step[name] for step in steps)


def report(arguments: argparse.Namespace, results: dict[str, list[dict[str, float]]]) -> None:
    first, last = arguments.warmup + 1, arguments.warmup + arguments.steps
    print(
        f"GRPO step, {arguments.prompts} prompts x {arguments.samples} samples x {arguments.max_tokens} tokens, "
        f"one optimizer update, micro-batch {arguments.micro_batch}; median of steps {first}..{last}; "
        f"{torch.get_num_threads()} torch threads"
    )
    print(f"  {'side':<16}{'s/step':>9}{'generate+score':>16}{'rest':>9}{'tokens/step':>13}")
    for side, steps in results.items():
        timed = steps[arguments.warmup :]
        rest = statistics.median(step["step"] - step["generate"] for step in timed)
        print(
            f"  {side:<16}{median(timed, 'step'):>9.3f}{median(timed, 'generate'):>16.3f}{rest:>9.3f}"
            f"{median(timed, 'tokens'):>13.0f}"
        )
    for side, steps in results.items():
        print(f"  {side} s/step, every step: " + " ".join(f"{step['step']:.2f}" for step in steps))
    ascent = results[f"ascent ({arguments.engine})"][arguments.warmup :]
    print("  ascent stages: " + ", ".join(f"{stage} {median(ascent, stage):.3f}" for stage in ASCENT_STAGES))
    ratio = median(ascent, "step") / median(results["trl"][arguments.warmup :], "step")
    print(f"step time ascent/trl: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side, after the warm-up")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    parser.add_argument("--quick", action="store_true", help="1 warm-up + 3 timed steps: a smoke test")
    parser.add_argument("--model", default="tiny:llama", help="a tiny: preset (random weights) or a HF directory")
    parser.add_argument("--engine", default="native", help="ascent's rollout engine (native | hf)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=128, help="samples per forward/backward, both sides")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--threads", type=int, default=0, help="torch threads for both sides; 0 = torch's default")
    arguments = parser.parse_args()
    if arguments.threads:
        torch.set_num_threads(arguments.threads)
    if arguments.quick:
        arguments.warmup, arguments.steps = 1, 3
    num_steps = arguments.warmup + arguments.steps
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        model_dir = Path(arguments.model)
        if arguments.model.startswith("tiny:"):
            model_dir = save_random_model(arguments.model, scratch / "model")
        config = ascent_config(arguments, model_dir, scratch / "ascent")
        trainer = RLTrainer(config)
        try:
            tokenizer = load_tokenizer(str(model_dir))  # what ascent loaded: the same ids on both sides
            dataset = trl_dataset(prompts_in_order(trainer, config, num_steps), tokenizer, config)
            ascent_steps: list[dict[str, float]] = []
            trl_steps = run_trl(
                arguments, model_dir, tokenizer, dataset, scratch / "trl",
                after_step=lambda: ascent_steps.append(ascent_step(trainer, len(ascent_steps) + 1)),
            )  # fmt: skip
        finally:
            trainer.shutdown()
    report(arguments, {f"ascent ({arguments.engine})": ascent_steps, "trl": trl_steps})


if __name__ == "__main__":
    main()
