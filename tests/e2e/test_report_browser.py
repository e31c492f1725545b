"""The run report in a real headless Chromium: `ascent view` serves it, the charts draw, the rollout browser pages,
filters and shows token advantages. Debian's Chromium (/usr/bin/chromium, which `make test` installs) is driven
by Playwright; the test fails, never skips, when either is missing, so CI always runs it.

ASCENT_UPDATE_SCREENSHOT=RUN_DIR also renders that run's report and saves docs/report.png (the README's picture)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a browser or server that hangs fails the test

CHROMIUM = os.environ.get("ASCENT_CHROMIUM", "/usr/bin/chromium")
# No network here: without the background-networking flags Chromium keeps dialling Google's hosts.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
KNOWN_TEXT = "Adding the two: \\boxed{42}"
KNOWN_TOKENS = ["Adding", " the", " two:", " \\boxed{", "42", "}"]
KNOWN_ADVANTAGES = [0.5, 0.5, 0.5, 0.75, 1.25, 0.5]


def sample(step: int, group: int, index: int, split: str) -> dict:
    """Group g asks (17+g)+25; even samples answer right (reward 1), odd ones are off by one. Sample 0 of group 0
    of step 4 is the known one, with its own text and per-token advantages."""
    a, b = 17 + group, 25
    right = index % 2 == 0
    tokens = ["The", " sum", " is", " \\boxed{", str(a + b if right else a + b + 1), "}"]
    advantage = (0.5 if right else -0.5) if split == "train" else None
    token_advantages = [advantage] * len(tokens) if split == "train" else []
    if (step, group, index, split) == (4, 0, 0, "train"):
        tokens, token_advantages = KNOWN_TOKENS, KNOWN_ADVANTAGES
    return {
        "step": step,
        "split": split,
        "group": group,
        "prompt": f"What is {a}+{b}? Answer as \\boxed{{N}}.",
        "response": "".join(tokens),
        "response_tokens": tokens,
        "token_advantages": token_advantages,
        "reward": float(right),
        "reward_components": {"format": 1.0, "correct": float(right)},
        "advantage": advantage,
        "finish_reason": "stop" if index != 3 else "length",
        "data_source": "arithmetic",
        "ground_truth": str(a + b),
        "response_length": len(tokens),
    }


def write_run(run_dir: Path) -> Path:
    """A run directory as the trainer leaves it: config, 5 steps of metrics, train rollouts of steps 4 and 5
    (3 groups x 4 samples each) and validation rollouts of step 5."""
    (run_dir / "rollouts").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(
        "model: {path: tiny:llama-micro}\nalgorithm: {name: grpo, advantage_estimator: grpo}\n"
        "rollout: {samples_per_prompt: 4}\ntrainer: {steps: 5, prompts_per_step: 3, run_name: browser-test}\n"
    )
    lines = [{"step": 0, "val/accuracy": 0.2, "val/reward": 0.2, "timing/validation": 0.3}]
    for step in range(1, 6):
        lines.append(
            {
                "step": step,
                "reward/mean": 0.1 * step,
                "reward/accuracy": 0.1 * step,
                "reward/format": 1.0,
                "policy/kl_ref": 0.001 * step,
                "policy/entropy": 1.0 - 0.1 * step,
                "response_length/mean": 6.0 + step,
                "policy/clip_frac_low": 0.01,
                "policy/clip_frac_high": 0.02 * step,
                "timing/rollout": 0.4,
                "timing/score": 0.01,
                "timing/logprobs": 0.2,
                "timing/update": 0.8,
                "timing/step": 1.45,
            }
        )
    lines[-1] |= {"val/accuracy": 0.6, "val/reward": 0.6, "timing/validation": 0.3}
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for name, step, split in [("step_000004", 4, "train"), ("step_000005", 5, "train"), ("val_step_000005", 5, "val")]:
        rows = [sample(step, group, index, split) for group in range(3) for index in range(4)]
        (run_dir / "rollouts" / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run_dir


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: `make test` installs Debian's (apt-get install chromium); "
            "elsewhere point ASCENT_CHROMIUM at a Chromium or Chrome binary"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[report-test]' (or `make install`)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def served(tmp_path):
    """`ascent view RUN_DIR --port 0` in its own process; yields the report's URL."""
    run_dir = write_run(tmp_path / "run")
    command = [sys.executable, "-m", "ascent.cli", "view", str(run_dir), "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        lines = [server.stdout.readline(), server.stdout.readline()]
        url = re.search(r"http://\S+", lines[1])
        assert url, f"ascent view printed no URL: {lines}"
        assert (run_dir / "report.html").exists()
        yield url.group(0)
    finally:
        server.terminate()
        server.wait(timeout=10)


def open_report(browser, url: str, errors: list[str]):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("body[data-ready='true']", timeout=10_000)
    return page


def test_report_renders_charts_and_browses_samples(browser, served, tmp_path):
    errors: list[str] = []
    page = open_report(browser, served, errors)

    titles = page.locator("figure.chart figcaption").all_inner_texts()
    expected = ["Reward and accuracy", "Reward components", "KL", "Entropy", "Response length (tokens)"]
    expected += ["Clip fraction", "Time per stage (s)"]
    assert [title.splitlines()[0] for title in titles] == [*expected, "Any metric"]
    for chart in page.locator("figure.chart").all():
        drawn = chart.locator("path.series, polyline").count()
        assert drawn > 0, f"{chart.get_attribute('data-title')}: nothing drawn"
        assert chart.locator("text.tick-label").count() >= 4
        assert chart.locator("text.axis-label").text_content() == "step"
    time_chart = page.locator("figure[data-title='Time per stage (s)']")
    layers = [g.get_attribute("data-metric") for g in time_chart.locator("g[data-metric]").all()]
    stages = ["timing/rollout", "timing/score", "timing/logprobs", "timing/update"]
    assert layers == [*stages, "timing/step", "timing/validation"]  # stacked areas, then lines over them
    assert time_chart.locator("path.area").count() == 4
    reward_chart = page.locator("figure[data-title='Reward and accuracy']")
    reward_chart.locator("svg").hover()
    assert reward_chart.locator(".tooltip").is_visible()
    assert "reward/mean" in reward_chart.locator(".tooltip").inner_text()
    reward_chart.get_by_role("button", name="reward/mean", exact=True).click()  # a legend entry hides its series
    assert reward_chart.locator("g[data-metric='reward/mean']").is_hidden()

    # The newest step is shown first; go to step 4 and find the known sample with its token advantages.
    status = page.locator("#page-status")
    assert status.get_attribute("data-count") == "12"
    page.select_option("#step-select", label="step 4 (12 samples)")
    known = page.locator("article.sample", has_text=KNOWN_TEXT)
    assert known.count() == 1
    tokens = known.locator(".tok[data-advantage]")
    assert tokens.all_inner_texts() == KNOWN_TOKENS
    assert [float(tokens.nth(i).get_attribute("data-advantage")) for i in range(6)] == KNOWN_ADVANTAGES
    assert tokens.nth(4).get_attribute("title") == "advantage +1.25"
    assert "format" in known.locator("table.components").inner_text()

    # Filters: 6 of the 12 samples are right; a reward bound and a text filter narrow it further.
    page.select_option("#verdict-filter", "wrong")
    assert status.get_attribute("data-count") == "6"
    assert known.count() == 0
    page.select_option("#verdict-filter", "all")
    page.fill("#reward-min", "0.5")
    assert status.get_attribute("data-count") == "6"
    page.fill("#text-filter", "17+25")
    assert status.get_attribute("data-count") == "2"
    page.fill("#text-filter", "")
    page.fill("#reward-min", "")

    # Paging: 5 per page gives pages of 5, 5 and 2.
    page.select_option("#page-size", "5")
    assert page.locator("article.sample").count() == 5
    page.click("#next-page")
    page.click("#next-page")
    assert status.inner_text() == "11–12 of 12 (filtered from 12)"
    assert page.locator("#next-page").is_disabled()

    # Validation samples have no advantages: plain tokens.
    page.select_option("#split-select", "val")
    assert page.locator("#step-select option").all_inner_texts() == ["step 5 (12 samples)"]
    assert page.locator("article.sample .tok").count() > 0
    assert page.locator("article.sample .tok[data-advantage]").count() == 0

    page.screenshot(path=tmp_path / "report.png", full_page=True)
    assert not errors, f"the page logged errors: {errors}"


def test_every_run_ends_with_a_report_of_its_samples(browser, tmp_path):
    """A real (tiny) GRPO run through the CLI: its rollout files and metrics, in the report it wrote at its end."""
    from ascent.cli import main

    run_dir = tmp_path / "run"
    code = main(
        [
            "train", "model.path=tiny:llama-micro", "trainer.device=cpu", "trainer.progress_bar=false",
            "data.synthetic.name=arithmetic", "data.synthetic.num_train=64", "data.synthetic.num_val=8",
            "rollout.max_response_tokens=6", "rollout.samples_per_prompt=4", "trainer.prompts_per_step=4",
            "optim.micro_batch_size=16", "trainer.steps=3", "trainer.val_every=2", "trainer.log_rollouts_every=1",
            "trainer.save_final_model=false", f"trainer.output_dir={run_dir}",
        ]
    )  # fmt: skip
    assert code == 0
    errors: list[str] = []
    page = open_report(browser, (run_dir / "report.html").as_uri(), errors)
    assert page.locator("figure.chart path.series").count() > 0
    steps = page.locator("#step-select option").all_inner_texts()
    assert steps == ["step 1 (16 samples)", "step 2 (16 samples)", "step 3 (16 samples)"]
    assert page.locator("article.sample").count() == 10
    assert page.locator("article.sample").first.locator(".tok[data-advantage]").count() > 0
    page.select_option("#split-select", "val")
    assert page.locator("#step-select option").count() == 3  # before training, step 2 and the last
    assert not errors, errors


@pytest.mark.skipif(not os.environ.get("ASCENT_UPDATE_SCREENSHOT"), reason="ASCENT_UPDATE_SCREENSHOT=RUN_DIR not set")
def test_readme_screenshot(browser):
    """docs/report.png, the README's picture, from the report of a real run: ASCENT_UPDATE_SCREENSHOT=RUN_DIR."""
    run_dir = os.environ["ASCENT_UPDATE_SCREENSHOT"]
    from ascent.report import write_report

    errors: list[str] = []
    path = write_report(run_dir, Path(run_dir) / "report.html")
    page = open_report(browser, path.resolve().as_uri(), errors)
    page.set_viewport_size({"width": 1280, "height": 1500})
    page.select_option("#page-size", "5")
    page.screenshot(path=REPO / "docs" / "report.png", full_page=False)
    shutil.copy(REPO / "docs" / "report.png", Path(run_dir) / "report.png")
    assert not errors, errors
