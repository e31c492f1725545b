"""`ascent export`: a run or a checkpoint as a Hugging Face directory, reloaded and checked before it is kept."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, GenerationConfig

from ascent.cli import main
from ascent.export import ExportError, verify_export
from ascent.models.tokenizers import load_tokenizer

pytestmark = pytest.mark.slow
DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("run")
    overrides = [
        "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
        "data.synthetic.name=arithmetic", f"reward.function={DATA / 'toy_rewards.py'}:count_sevens",
        "trainer.steps=2", "trainer.save_every=1", "optim.lr=1e-2",
        "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
        f"trainer.output_dir={run}",
    ]  # fmt: skip
    assert main(["train", *overrides]) == 0
    return run


def test_a_run_exports_its_newest_checkpoint_as_a_loadable_directory(run_dir, tmp_path, capsys):
    assert main(["export", str(run_dir), str(tmp_path / "hf")]) == 0
    assert "its logits match the checkpoint's weights" in capsys.readouterr().out
    exported = tmp_path / "hf"
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json"} <= {
        path.name for path in exported.iterdir()
    }
    final = load_file(run_dir / "final" / "model.safetensors")  # the run's last weights = checkpoint step 2
    weights = load_file(exported / "model.safetensors")
    assert weights.keys() == final.keys() and all(torch.equal(weights[k], final[k]) for k in final)
    text = "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n"
    assert load_tokenizer(str(exported))(text)["input_ids"] == load_tokenizer(str(run_dir / "final"))(text)["input_ids"]
    assert GenerationConfig.from_pretrained(exported).eos_token_id is not None


def test_an_earlier_checkpoint_exports_its_own_weights(run_dir, tmp_path):
    assert main(["export", str(run_dir / "checkpoints" / "step_000001"), str(tmp_path / "first")]) == 0
    first = load_file(tmp_path / "first" / "model.safetensors")
    final = load_file(run_dir / "final" / "model.safetensors")
    assert any(not torch.equal(first[name], final[name]) for name in final)  # step 2 changed the weights


def test_an_export_that_does_not_reproduce_the_model_fails_loudly(run_dir, tmp_path, capsys):
    model = AutoModelForCausalLM.from_pretrained(run_dir / "final")
    tokenizer = load_tokenizer(str(run_dir / "final"))
    assert verify_export(model, run_dir / "final", tokenizer) == 0.0
    with torch.no_grad():
        model.model.norm.weight.mul_(1.5)  # what a wrong weight mapping or a lost update would look like
    with pytest.raises(ExportError, match="does not reproduce the trained model: logits differ by up to"):
        verify_export(model, run_dir / "final", tokenizer)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("keep me")
    assert main(["export", str(run_dir), str(tmp_path / "busy")]) == 1
    assert "is not empty" in capsys.readouterr().err
    assert (tmp_path / "busy" / "notes.txt").read_text() == "keep me"
