"""TensorBoard, W&B (offline) and MLflow (SQLite store) get what metrics.jsonl gets, also across a resume; rollout
samples land in rollouts/ in the format `ascent view` reads. Each tracker is read back with its own library."""

import json
import shutil
import struct
from pathlib import Path

import pytest

from ascent.cli import main

DATA = Path(__file__).parent.parent / "data"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated"),  # MLflow 3.17's SQL store
]
# The keys of one rollout sample, spelled out: ascent/report reads exactly these.
SAMPLE_KEYS = {
    "step", "split", "group", "prompt", "response", "response_tokens", "token_advantages", "reward",
    "reward_components", "advantage", "finish_reason", "data_source", "ground_truth", "response_length",
}  # fmt: skip
# Compared across metrics.jsonl and the trackers; timing/step differs between the first try at step 3 and the rerun.
KEYS = ("reward/mean", "policy/entropy", "val/accuracy", "timing/step")


def train(run_dir: Path, *overrides: str) -> int:
    return main(
        [
            "train", "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
            "data.synthetic.name=arithmetic", "data.synthetic.num_train=64", "data.synthetic.num_val=4",
            "trainer.val_every=2", f"reward.function={DATA / 'toy_rewards.py'}:sevens_with_components",
            "rollout.max_response_tokens=8", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=3",
            "optim.lr=1e-2", "optim.micro_batch_size=12", "trainer.save_final_model=false",
            "trainer.log_rollouts_every=2", "trainer.log_rollouts_max=10", "trainer.steps=3", "trainer.save_every=2",
            "trainer.loggers=[tensorboard,wandb,mlflow]", f"trainer.output_dir={run_dir}", *overrides,
        ]
    )  # fmt: skip


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Three steps with checkpoints at 2 and 3; then, as after a crash during step 3's save, a resume from step 2
    that runs step 3 again. Returns the run directory and the first try's metrics."""
    root = tmp_path_factory.mktemp("trackers")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_MODE", "offline")
        env.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):  # nothing written to $HOME
            env.setenv(name, str(root / "wandb-home"))
        for name in ("WANDB_DIR", "MLFLOW_TRACKING_URI", "WANDB_RUN_ID", "WANDB_RESUME"):
            env.delenv(name, raising=False)
        run_dir = root / "run"
        assert train(run_dir) == 0
        first_try = read_jsonl(run_dir / "metrics.jsonl")
        shutil.rmtree(run_dir / "checkpoints" / "step_000003")
        assert train(run_dir) == 0
    return run_dir, first_try


def expected_series(run_dir: Path, key: str) -> dict[int, float]:
    return {entry["step"]: entry[key] for entry in read_jsonl(run_dir / "metrics.jsonl") if entry.get(key) is not None}


def test_metrics_jsonl_holds_each_step_once_with_the_rerun_step_3(resumed_run):
    run_dir, first_try = resumed_run
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [entry["step"] for entry in metrics] == [0, 1, 2, 3]
    assert metrics[:3] == first_try[:3]
    assert metrics[3]["timing/step"] != first_try[3]["timing/step"]  # what tells the two tries at step 3 apart


def test_tensorboard_shows_metrics_jsonl_and_hides_the_first_try_at_step_3(resumed_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = resumed_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    for key in KEYS:
        expected = expected_series(run_dir, key)
        assert [event.step for event in events.Scalars(key)] == list(expected), key
        assert [event.value for event in events.Scalars(key)] == pytest.approx(list(expected.values()), rel=1e-6)
    assert "config/text_summary" in events.Tags()["tensors"]  # the resolved config, as text


def read_wandb_file(path: Path) -> list:
    """The records of a W&B transaction log (`run-<id>.wandb`), parsed with wandb's own protobuf classes. The
    framing is LevelDB's log format: a 7-byte header, then 32 KiB blocks of chunks (checksum u32, length u16,
    type u8: 1 full, 2 first, 3 middle, 4 last). wandb 0.31 no longer ships a Python reader for it."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32 * 1024
    assert data[:4] == b":W&B", data[:7]
    records, position, pending = [], 7, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:
            position += left
            continue
        chunk, position = data[position + 7 : position + 7 + length], position + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_history(path: Path) -> dict[int, dict]:
    rows = {}
    for record in read_wandb_file(path):
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            rows[items["_step"]] = items
    return rows


def test_wandb_offline_files_hold_metrics_jsonl_and_the_resume_continues_the_run(resumed_run):
    run_dir, first_try = resumed_run
    run_id = json.loads((run_dir / "trackers.json").read_text())["wandb_run_id"]
    runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert [run.name.rsplit("-", 1)[1] for run in runs] == [run_id, run_id]  # the resumed run is the same run
    first, resumed = (wandb_history(run / f"run-{run_id}.wandb") for run in runs)
    assert sorted(first) == [0, 1, 2, 3] and sorted(resumed) == [3]
    assert first[3]["timing/step"] == first_try[3]["timing/step"]
    history = first | resumed  # what `wandb sync` makes of the two: the rerun's step 3
    for key in KEYS:
        expected = expected_series(run_dir, key)
        assert {step: row[key] for step, row in history.items() if key in row} == expected, key
    config = [record.config for record in read_wandb_file(runs[0] / f"run-{run_id}.wandb") if record.HasField("config")]
    logged = {item.key: json.loads(item.value_json) for record in config for item in record.update}
    assert logged["rollout"]["samples_per_prompt"] == 4


def test_mlflow_run_holds_metrics_jsonl_and_the_resume_continues_the_run(resumed_run):
    from mlflow.tracking import MlflowClient

    run_dir, first_try = resumed_run
    state = json.loads((run_dir / "trackers.json").read_text())
    assert state["mlflow_tracking_uri"] == f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
    client = MlflowClient(state["mlflow_tracking_uri"])
    run = client.get_run(state["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    assert len(client.search_runs([run.info.experiment_id])) == 1  # the resume logged into the same run
    assert run.data.params["rollout.samples_per_prompt"] == "4"
    for key in KEYS:
        history = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp))
        latest = {metric.step: metric.value for metric in history}  # MLflow keeps the first try at step 3 too
        assert latest == pytest.approx(expected_series(run_dir, key), rel=1e-12), key
    timings = [metric.value for metric in client.get_metric_history(run.info.run_id, "timing/step") if metric.step == 3]
    assert len(timings) == 2 and timings[0] == pytest.approx(first_try[3]["timing/step"])


def test_rollout_samples_are_whole_groups_with_per_token_advantages(resumed_run):
    run_dir, _ = resumed_run
    names = sorted(path.name for path in (run_dir / "rollouts").iterdir())
    assert names == [f"step_00000{n}.jsonl" for n in (1, 2, 3)] + [f"val_step_00000{n}.jsonl" for n in (0, 2, 3)]
    nonzero = 0
    for step in (1, 2, 3):
        samples = read_jsonl(run_dir / "rollouts" / f"step_{step:06d}.jsonl")
        assert [sample["group"] for sample in samples] == [0] * 4 + [1] * 4  # whole groups of 4 within 10
        for sample in samples:
            assert set(sample) == SAMPLE_KEYS
            assert sample["step"] == step and sample["split"] == "train"
            assert len(sample["token_advantages"]) == len(sample["response_tokens"]) == sample["response_length"]
            mean = sum(sample["token_advantages"]) / sample["response_length"]
            assert sample["advantage"] == pytest.approx(mean, abs=1e-6)
            assert set(sample["reward_components"]) == {"score", "sevens", "characters"}
            assert sample["reward"] == pytest.approx(sample["reward_components"]["score"], abs=1e-6)
            assert sample["reward_components"]["sevens"] == sample["response"].count("7")
            assert sample["finish_reason"] in ("stop", "length") and sample["data_source"] == "ascent/arithmetic"
            assert "What is" in sample["prompt"] and sample["ground_truth"].lstrip("-").isdigit()
            nonzero += sample["advantage"] != 0
    assert nonzero  # the rewards differ within some group, so some advantages do too


def test_validation_samples_are_written_at_each_validation(resumed_run):
    run_dir, _ = resumed_run
    for step in (0, 2, 3):
        samples = read_jsonl(run_dir / "rollouts" / f"val_step_{step:06d}.jsonl")
        assert [sample["group"] for sample in samples] == [0, 1, 2, 3]  # the 4 validation prompts, one sample each
        for sample in samples:
            assert set(sample) == SAMPLE_KEYS
            assert sample["split"] == "val" and sample["step"] == step
            assert sample["token_advantages"] == [] and sample["advantage"] is None
            assert len(sample["response_tokens"]) == sample["response_length"]


def test_sft_sends_its_metrics_to_the_trackers_too(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "sft"
    assert main(["sft", "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
                 "data.synthetic.name=arithmetic", "data.synthetic.num_train=64", "data.synthetic.num_val=2",
                 "rollout.max_response_tokens=8", "trainer.steps=2", "sft.batch_size=4", "optim.micro_batch_size=4",
                 "trainer.loggers=[tensorboard]", f"trainer.output_dir={run_dir}"]) == 0  # fmt: skip
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    expected = expected_series(run_dir, "sft/nll")
    assert [(event.step, event.value) for event in events.Scalars("sft/nll")] == [
        (step, pytest.approx(value, rel=1e-6)) for step, value in expected.items()
    ]
    assert [sample["split"] for sample in read_jsonl(run_dir / "rollouts" / "val_step_000002.jsonl")] == ["val"] * 2
