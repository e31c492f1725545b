"""`ascent train | sft`: command-line entry points. Imports torch only after the config is valid."""

from __future__ import annotations

import argparse
import sys

from ascent.config import ConfigError, derive_schedule, load_config, to_yaml
from ascent.config.schedule import check_sft_schedule

USAGE = """examples:
  ascent train examples/demo.yaml
  ascent train examples/demo.yaml trainer.steps=50 rollout.samples_per_prompt=4
  ascent train examples/demo.yaml --dry-run     # print the resolved config and schedule, then exit
  ascent sft examples/demo_sft.yaml"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascent", description="RL post-training for language models.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in [("train", "RL training (GRPO)"), ("sft", "supervised fine-tuning")]:
        command = commands.add_parser(name, help=text, epilog=USAGE, formatter_class=argparse.RawTextHelpFormatter)
        command.add_argument("args", nargs="+", metavar="CONFIG.yaml | key=value", help="config files, then overrides")
        command.add_argument("--dry-run", action="store_true", help="print the resolved config and schedule and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    files = [arg for arg in arguments.args if "=" not in arg]
    overrides = [arg for arg in arguments.args if "=" in arg]
    try:
        config = load_config(files, overrides)
        if arguments.command == "sft":
            check_sft_schedule(config)
    except ConfigError as error:
        print(f"ascent: config error: {error}", file=sys.stderr)
        return 2
    if arguments.dry_run:
        print(to_yaml(config))
        if arguments.command == "train":
            print("schedule:\n" + derive_schedule(config).describe())
        return 0
    return _run(arguments.command, config)


def _run(command: str, config) -> int:
    from ascent.controller.worker_group import WorkerError
    from ascent.data.records import DataError

    try:
        if command == "train":
            from ascent.trainer.rl import train

            train(config)
        else:
            from ascent.trainer.sft import train_sft

            train_sft(config)
    except (DataError, ConfigError) as error:
        print(f"ascent: {error}", file=sys.stderr)
        return 2
    except WorkerError as error:
        hint = ""
        if command == "train" and config.trainer.save_every:
            hint = f"\nContinue from its newest checkpoint: ascent train {config.trainer.output_dir}/config.yaml"
        print(f"ascent: a worker failed: {error}{hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
