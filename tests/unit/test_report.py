"""The run report's data and page, without a browser (tests/e2e/test_report_browser.py drives one)."""

import json
import logging
import re

from ascent.cli import main
from ascent.report import write_report, write_report_or_warn
from ascent.report.data import chart_specs, is_correct, read_metrics, read_rollouts

HOSTILE = 'ok </script><script>alert("x")</script> <!-- done'


def rollout(step: int, group: int, reward: float, response: str = "\\boxed{3}") -> dict:
    return {
        "step": step,
        "split": "train",
        "group": group,
        "prompt": "1+2=",
        "response": response,
        "response_tokens": [response],
        "token_advantages": [0.123456789],
        "reward": reward,
        "reward_components": {"format": 1.0, "nan_part": float("nan")},
        "advantage": 0.5,
        "finish_reason": "stop",
        "data_source": "arithmetic",
        "ground_truth": "3",
        "response_length": 1,
    }


def write_run(run_dir, steps=(1, 2), samples_per_step=4):
    (run_dir / "rollouts").mkdir(parents=True)
    metrics = [{"step": s, "reward/mean": 0.1 * s, "timing/step": 1.0, "timing/rollout": 0.5} for s in steps]
    lines = [json.dumps(m) for m in metrics] + ['{"step": 9, "reward/me']  # a killed run's cut last line
    (run_dir / "metrics.jsonl").write_text("\n".join(lines))
    for step in steps:
        rows = [rollout(step, i // 2, float(i % 2)) for i in range(samples_per_step)]
        if step == steps[-1]:
            rows[0]["response"] = HOSTILE
        (run_dir / "rollouts" / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def embedded_data(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    return json.loads(block.group(1))


def test_report_embeds_the_data_and_escapes_script_endings(tmp_path):
    run_dir = write_run(tmp_path / "run")
    html = write_report(run_dir).read_text()
    assert html.count("</script>") == 2  # the data block's and the script's: the response's stay escaped
    assert "<!--" not in html.split('id="report-data">')[1]
    assert all(link.startswith("data:") for link in re.findall(r'(?:src|href)="([^"]*)"', html))  # nothing to fetch
    data = embedded_data(html)
    assert data["metrics"]["steps"] == [1, 2]
    assert data["metrics"]["series"]["reward/mean"] == [0.1, 0.2]
    last = data["rollouts"]["train"][-1]
    assert last["step"] == 2 and last["num_samples"] == 4
    first = last["samples"][0]
    assert first["response"] == HOSTILE
    assert first["token_advantages"] == [0.1235]  # rounded: the page need not carry full precision
    assert first["reward_components"] == {"format": 1.0, "nan_part": None}  # JSON has no NaN
    assert [s["correct"] for s in last["samples"]] == [False, True, False, True]  # reward > 0, as reward/accuracy


def test_metrics_keep_the_last_line_of_a_step_and_skip_a_cut_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = ['{"step": 1, "a": 1.0}', '{"step": 2, "a": null, "b": 2.0}', '{"step": 1, "a": 3.0}', '{"step": 3, "a']
    path.write_text("\n".join(lines))
    assert read_metrics(path) == {"steps": [1, 2], "series": {"a": [3.0, None], "b": [None, 2.0]}}


def test_chart_specs_group_the_metrics_present():
    names = ["reward/mean", "reward/format", "val/accuracy", "policy/entropy", "timing/update", "timing/rollout"]
    names += ["timing/step", "timing/validation", "reward/errors", "val/nll"]
    charts = {chart["title"]: chart for chart in chart_specs(sorted(names))}
    assert list(charts) == ["Reward and accuracy", "Reward components", "SFT loss (NLL per token)", "Entropy",
                            "Time per stage (s)"]  # fmt: skip
    assert charts["Reward and accuracy"]["metrics"] == ["reward/mean", "val/accuracy"]
    assert charts["Reward components"]["metrics"] == ["reward/format"]
    time = charts["Time per stage (s)"]
    assert time["stacked"] and time["metrics"] == ["timing/rollout", "timing/update"]
    assert time["lines"] == ["timing/step", "timing/validation"]


def test_a_sample_is_correct_by_its_score_not_its_shaped_reward():
    assert is_correct(-0.2, {"score": 1.0, "overlong_penalty": -1.2})  # right, but too long
    assert not is_correct(0.0, {"score": 0.0})
    assert is_correct(0.0, {"score": 0.0, "accuracy": 1.0})  # the reward function's own accuracy wins
    assert is_correct(1.0, {})


def test_rollouts_are_capped_per_step_and_spread_over_steps(tmp_path):
    run_dir = write_run(tmp_path / "run", steps=(1, 2, 3, 4, 5), samples_per_step=6)
    rollouts = read_rollouts(run_dir, max_samples_per_step=4, max_rollout_steps=3)
    assert [step["step"] for step in rollouts["train"]] == [1, 3, 5]
    assert rollouts["num_steps"] == {"train": 5, "val": 0}
    assert all(len(step["samples"]) == 4 and step["num_samples"] == 6 for step in rollouts["train"])
    assert [sample["group"] for sample in rollouts["train"][0]["samples"]] == [0, 0, 1, 1]  # whole groups first


def test_long_responses_leave_fewer_steps_in_the_page(tmp_path, monkeypatch):
    run_dir = write_run(tmp_path / "run", steps=(1, 2, 3, 4, 5), samples_per_step=6)
    monkeypatch.setattr("ascent.report.data.MAX_TOKENS_PER_SPLIT", 12)  # 6 samples of 1 token: 2 steps fit
    rollouts = read_rollouts(run_dir, max_samples_per_step=64, max_rollout_steps=100)
    assert [step["step"] for step in rollouts["train"]] == [1, 5]


def test_a_run_without_rollouts_or_metrics_still_gets_a_page(tmp_path):
    data = embedded_data(write_report(tmp_path).read_text())
    assert data["metrics"] == {"steps": [], "series": {}} and data["rollouts"]["train"] == []


def test_report_failure_at_the_end_of_a_run_only_warns(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert write_report_or_warn(tmp_path / "missing") is None
    assert "could not write the run report" in caplog.text


def test_view_command_writes_without_serving(tmp_path, capsys):
    run_dir = write_run(tmp_path / "run")
    assert main(["view", str(run_dir), "--no-serve"]) == 0
    assert (run_dir / "report.html").exists()
    assert main(["view", str(run_dir), "--out", str(tmp_path / "elsewhere.html")]) == 0
    assert (tmp_path / "elsewhere.html").exists()
    assert main(["view", str(tmp_path / "missing"), "--no-serve"]) == 2
    assert "no run directory" in capsys.readouterr().err
