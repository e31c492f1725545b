"""`ascent train | sft | view | export`: command-line entry points. Imports torch only after the config is valid."""

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
    _add_view_parser(commands)
    export = commands.add_parser(
        "export",
        help="write a run's policy as a verified Hugging Face directory",
        description="Write the policy of a checkpoint (or of a run's newest checkpoint, or its final/ model) as a "
        "Hugging Face directory: safetensors, config, tokenizer, generation config. The export is reloaded with "
        "from_pretrained and its logits are compared with the trained weights'; a mismatch fails the export.",
    )
    export.add_argument("source", metavar="RUN_OR_CHECKPOINT", help="a run directory or a checkpoints/step_N directory")
    export.add_argument("out_dir", metavar="OUT_DIR", help="a new (or empty) directory")
    return parser


def _add_view_parser(commands) -> None:
    view = commands.add_parser(
        "view",
        help="write a run's HTML report and serve it",
        description="Write RUN_DIR/report.html (metric curves and a rollout browser, one self-contained file) and "
        "serve RUN_DIR on localhost; with --out or --no-serve, only write it.",
    )
    view.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (trainer.output_dir)")
    view.add_argument("--out", metavar="FILE", help="write the report here instead, and do not serve it")
    view.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0 = any free one)")
    view.add_argument("--no-serve", action="store_true", help="only write the report")
    view.add_argument("--max-samples-per-step", type=int, metavar="N", help="rollout samples kept per step (64)")
    view.add_argument("--max-rollout-steps", type=int, metavar="N", help="steps whose rollouts are kept (100)")


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    if arguments.command == "view":
        return _view(arguments)
    if arguments.command == "export":
        return _export(arguments)
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


def _export(arguments) -> int:
    from ascent.export import ExportError, export

    try:
        path = export(arguments.source, arguments.out_dir)
    except (ExportError, ConfigError) as error:
        print(f"ascent: export failed: {error}", file=sys.stderr)
        return 1
    print(f"exported to {path} (reloaded with from_pretrained; its logits match the checkpoint's weights)")
    return 0


def _view(arguments) -> int:
    from ascent.report import REPORT_FILE, serve, write_report

    limits = {"max_samples_per_step": arguments.max_samples_per_step, "max_rollout_steps": arguments.max_rollout_steps}
    try:
        path = write_report(arguments.run_dir, arguments.out, **{k: v for k, v in limits.items() if v is not None})
    except (FileNotFoundError, ValueError) as error:
        print(f"ascent: {error}", file=sys.stderr)
        return 2
    print(f"report written to {path}", flush=True)
    if arguments.out is None and not arguments.no_serve:
        try:
            serve(arguments.run_dir, REPORT_FILE, arguments.port)
        except OSError as error:
            print(f"ascent: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
