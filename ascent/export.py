"""`ascent export RUN_OR_CHECKPOINT OUT_DIR`: a Hugging Face directory of the trained policy, verified.

The source is a checkpoint directory (`<run>/checkpoints/step_N`) or a run directory (its newest intact
checkpoint, or its `final/` model when it saved no checkpoint). The export holds safetensors weights, the
model config, the tokenizer and the generation config. It is then reloaded with `from_pretrained` and its
logits on a fixed input are compared with those of the weights it was written from: any difference beyond
the dtype's rounding fails the export, and the directory is removed rather than left half right.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from ascent.config import ConfigError, load_config
from ascent.models.builders import build_model_from_config
from ascent.models.tokenizers import load_tokenizer
from ascent.trainer.checkpoint import checkpoint_problem, latest_checkpoint
from ascent.workers.distributed import load_model_state

# The largest logit difference an export may show against its source, by dtype (the same weights and code
# give identical logits; the margin covers kernels that sum in another order on another machine).
_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


class ExportError(RuntimeError):
    pass


def export(source: str | Path, out_dir: str | Path) -> Path:
    """Write and verify the Hugging Face directory of `source` (a run or a checkpoint) at `out_dir`."""
    source, out_dir = Path(source), Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ExportError(f"{out_dir} exists and is not empty; choose a new directory")
    model, tokenizer = _load_policy(source)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        model.generation_config.save_pretrained(staging)
        verify_export(model, staging, tokenizer)
        shutil.rmtree(out_dir, ignore_errors=True)
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def verify_export(model: PreTrainedModel, export_dir: Path, tokenizer) -> float:
    """Reload `export_dir` and compare its logits with `model`'s on a fixed input; returns the largest
    difference, raising ExportError beyond the dtype's tolerance."""
    dtype = next(model.parameters()).dtype
    reloaded = AutoModelForCausalLM.from_pretrained(export_dir, dtype=dtype).eval()
    text = "Verify the export: 12 + 30 = 42."
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        expected = model.eval()(ids).logits.float()
        actual = reloaded(ids).logits.float()
    difference = float((expected - actual).abs().max())
    if not difference <= _TOLERANCE[dtype]:  # NaN fails too
        raise ExportError(
            f"the export in {export_dir} does not reproduce the trained model: logits differ by up to "
            f"{difference:.3g} (allowed {_TOLERANCE[dtype]:g} in {dtype})"
        )
    return difference


def _load_policy(source: Path) -> tuple[PreTrainedModel, object]:
    checkpoint = _checkpoint_of(source)
    if checkpoint is None:  # a run without checkpoints: its final model
        final = source / "final"
        if not (final / "config.json").is_file():
            raise ExportError(f"{source} is neither a checkpoint nor a run directory with checkpoints or final/")
        return AutoModelForCausalLM.from_pretrained(final), load_tokenizer(str(final))
    try:
        config = load_config([checkpoint / "config.yaml"])
    except ConfigError as error:
        raise ExportError(f"cannot read the config saved in {checkpoint}: {error}") from error
    tokenizer = load_tokenizer(config.model.tokenizer_path or config.model.path, config.model.trust_remote_code)
    model = build_model_from_config(config.model, tokenizer, config.trainer.seed)
    load_model_state(checkpoint / "policy", model)
    return model, tokenizer


def _checkpoint_of(source: Path) -> Path | None:
    if (source / "trainer_state.json").is_file():
        problem = checkpoint_problem(source)
        if problem is not None:
            raise ExportError(f"checkpoint {source} is damaged: {problem}")
        return source
    return latest_checkpoint(source)
