"""`ascent train ARGS...` in a process that SIGKILLs itself at a chosen point of a checkpoint (for tests).

    python killed_run.py after-save STEP ARGS...    killed once checkpoint STEP is complete
    python killed_run.py during-save STEP ARGS...   killed while checkpoint STEP is half written

Nothing in ascent knows about this: the script patches the checkpoint functions from outside.
"""

import os
import signal
import sys
from pathlib import Path

import torch

import ascent.trainer.rl
from ascent.cli import main


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after_save(step_to_kill: int) -> None:
    save = ascent.trainer.rl.save_checkpoint

    def save_then_die(run_dir, step, *args, **kwargs):
        path = save(run_dir, step, *args, **kwargs)
        if step == step_to_kill:
            die()
        return path

    ascent.trainer.rl.save_checkpoint = save_then_die


def kill_during_save(step_to_kill: int) -> None:
    """Dies writing the controller's RNG file: the workers' state is already in the temporary directory."""
    save = torch.save

    def save_or_die(obj, file, *args, **kwargs):
        path = Path(str(file))
        if path.name == "controller_rng.pt" and path.parent.name == f".tmp-step_{step_to_kill:06d}":
            path.write_bytes(b"half a file")
            die()
        return save(obj, file, *args, **kwargs)

    torch.save = save_or_die


if __name__ == "__main__":
    mode, step, arguments = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    {"after-save": kill_after_save, "during-save": kill_during_save}[mode](step)
    sys.exit(main(["train", *arguments]))
