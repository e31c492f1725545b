"""Reward functions: the arithmetic scorer, loading user code, resolving by data source, the manager."""

import logging
import math
import textwrap

import numpy as np
import pytest

from ascent.config.errors import ConfigError
from ascent.data.records import PromptRecord
from ascent.rewards import arithmetic
from ascent.rewards.loader import BUILTIN_SCORERS, load_function, resolve_reward_functions
from ascent.rewards.manager import RewardManager

# ---- arithmetic scorer --------------------------------------------------------------------------------------


def score(solution: str, ground_truth) -> dict:
    return arithmetic.compute_score("ascent/arithmetic", solution, ground_truth)


def test_correct_answer():
    assert score("12 + 7 = \\boxed{19}", "19") == {"score": 1.0, "accuracy": 1.0, "format": 1.0}
    assert score("\\boxed{ 19 }", 19)["score"] == 1.0  # whitespace and an int ground truth are fine


def test_wrong_answer_keeps_the_format_credit():
    assert score("\\boxed{18}", "19") == {"score": 0.0, "accuracy": 0.0, "format": 1.0}
    assert score("\\boxed{nineteen}", "19") == {"score": 0.0, "accuracy": 0.0, "format": 1.0}


def test_missing_box_scores_zero_without_format():
    assert score("19", "19") == {"score": 0.0, "accuracy": 0.0, "format": 0.0}
    assert score("\\boxed{19", "19")["format"] == 0.0


def test_negative_answers():
    assert score("\\boxed{-7}", "-7")["score"] == 1.0
    assert score("\\boxed{7}", "-7")["score"] == 0.0
    assert score("\\boxed{-7}", "7")["score"] == 0.0


def test_last_box_counts():
    assert score("\\boxed{3} no wait \\boxed{4}", "4")["score"] == 1.0
    assert score("\\boxed{4} no wait \\boxed{3}", "4")["score"] == 0.0
    assert arithmetic.last_boxed("\\boxed{1} and \\boxed{ 2 }") == "2"
    assert arithmetic.last_boxed("no box") is None


def test_malformed_number_scores_zero_instead_of_raising():
    assert score("\\boxed{--5}", "-5")["score"] == 0.0


# ---- loading user reward functions --------------------------------------------------------------------------

USER_REWARD = textwrap.dedent(
    """
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": float(solution_str.strip() == str(ground_truth)), "length": len(solution_str)}

    def helper(x):
        return x

    def _private():
        pass
    """
)


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(USER_REWARD)
    return path


def test_load_function_with_verl_signature(reward_file):
    function = load_function(f"{reward_file}:compute_score")
    assert function.__name__ == "compute_score"
    assert function("src", " 42 ", "42", {"index": 0}) == {"score": 1.0, "length": 4}
    assert function(data_source="src", solution_str="41", ground_truth="42", extra_info={})["score"] == 0.0


def test_load_function_missing_file(tmp_path):
    missing = tmp_path / "nope.py"
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_function(f"{missing}:compute_score")
    assert str(missing) in str(info.value)


def test_load_function_missing_function_lists_the_available_ones(reward_file):
    with pytest.raises(ConfigError) as info:
        load_function(f"{reward_file}:compute_scor")
    message = str(info.value)
    assert "has no function 'compute_scor'" in message
    assert "(functions: compute_score, helper)" in message  # private names are not offered


@pytest.mark.parametrize("spec", ["my_reward.py", "my_reward.py:", ":compute_score", ""])
def test_load_function_bad_spec(spec):
    with pytest.raises(ConfigError, match=r"must look like path/to/file\.py:function_name"):
        load_function(spec)


def test_resolve_builtin_scorer_by_data_source():
    functions = resolve_reward_functions(None, {"ascent/arithmetic"})
    assert functions == {"ascent/arithmetic": arithmetic.compute_score}
    assert BUILTIN_SCORERS["ascent/arithmetic"] is arithmetic.compute_score


def test_resolve_unknown_data_source_suggests_reward_function():
    with pytest.raises(ConfigError) as info:
        resolve_reward_functions(None, {"openai/gsm8k", "ascent/arithmetic", "lighteval/MATH"})
    message = str(info.value)
    assert "'lighteval/MATH', 'openai/gsm8k'" in message  # only the missing ones, sorted
    assert "reward.function=path/to/file.py:compute_score" in message
    assert "built-in sources: ascent/arithmetic" in message


def test_resolve_user_function_serves_every_data_source(reward_file):
    functions = resolve_reward_functions(f"{reward_file}:compute_score", {"a", "b"})
    assert set(functions) == {"a", "b"}
    assert functions["a"] is functions["b"]
    assert functions["a"].__name__ == "compute_score"


# ---- reward manager -----------------------------------------------------------------------------------------


def record(data_source: str = "src", ground_truth="1") -> PromptRecord:
    return PromptRecord(messages=[{"role": "user", "content": "q"}], ground_truth=ground_truth, data_source=data_source)


def test_dict_results_become_components_and_floats_do_not():
    manager = RewardManager({"ascent/arithmetic": arithmetic.compute_score, "plain": lambda *args: 0.25})
    records = [record("ascent/arithmetic", "3"), record("ascent/arithmetic", "3"), record("plain")]
    batch = manager.score(["\\boxed{3}", "3", "anything"], records)
    assert batch.scores == [1.0, 0.0, 0.25]
    assert sorted(batch.components) == ["accuracy", "format"]
    assert batch.components["accuracy"][:2] == [1.0, 0.0]
    assert batch.components["format"][:2] == [1.0, 0.0]
    assert math.isnan(batch.components["accuracy"][2])  # the plain function reported no components
    assert batch.failed == [False, False, False]
    assert batch.error_counts == {} and batch.num_errors == 0


def test_numeric_results_of_other_types_are_accepted():
    values = iter([True, np.float32(0.5), 3, {"score": np.float64(2.0), "note": "text", "len": np.int64(4)}])
    manager = RewardManager({"src": lambda *args: next(values)})
    batch = manager.score(["a", "b", "c", "d"], [record()] * 4)
    assert batch.scores == [1.0, 0.5, 3.0, 2.0]
    assert all(isinstance(s, float) for s in batch.scores)
    assert list(batch.components) == ["len"]  # non-numeric parts are left out
    assert batch.components["len"][3] == 4.0
    assert not any(batch.failed)


def flaky(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "div":
        return 1 / 0
    if solution_str == "key":
        return extra_info["missing"]
    return 1.0


def test_raising_function_is_counted_scored_flagged_and_logged_once(caplog):
    manager = RewardManager({"src": flaky}, failure_score=-1.0)
    responses = ["ok", "div", "div", "key", "ok"]
    with caplog.at_level(logging.ERROR, logger="ascent.rewards.manager"):
        batch = manager.score(responses, [record()] * 5)
        second = manager.score(["div", "key"], [record()] * 2)
    assert batch.scores == [1.0, -1.0, -1.0, -1.0, 1.0]
    assert batch.failed == [False, True, True, True, False]
    assert batch.error_counts == {"ZeroDivisionError": 2, "KeyError": 1}
    assert batch.num_errors == 3
    assert second.error_counts == {"ZeroDivisionError": 1, "KeyError": 1}  # counted on every batch...

    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # ...but each exception type's traceback is logged only once
    by_kind = {
        kind: [r.getMessage() for r in errors if f"raised {kind}" in r.getMessage()] for kind in batch.error_counts
    }
    assert len(by_kind["ZeroDivisionError"]) == len(by_kind["KeyError"]) == 1
    zero_division = by_kind["ZeroDivisionError"][0]
    assert "reward function flaky" in zero_division and "scored -1.0" in zero_division
    assert "Traceback (most recent call last)" in zero_division and "1 / 0" in zero_division


@pytest.mark.parametrize(
    ("result", "kind"),
    [
        ("1.0", "TypeError"),
        (None, "TypeError"),
        (math.nan, "ValueError"),
        (math.inf, "ValueError"),
        ({"accuracy": 1.0}, "TypeError"),  # a dict without 'score'
        ({"score": "high"}, "TypeError"),
        ({"score": math.nan}, "ValueError"),
    ],
)
def test_unusable_results_count_as_errors(result, kind):
    manager = RewardManager({"src": lambda *args: result}, failure_score=0.5)
    batch = manager.score(["x", "y"], [record(), record()])
    assert batch.scores == [0.5, 0.5]
    assert batch.failed == [True, True]
    assert batch.error_counts == {kind: 2}
    assert batch.components == {}


def test_response_and_record_counts_must_match():
    with pytest.raises(ValueError):
        RewardManager({"src": lambda *args: 1.0}).score(["a", "b"], [record()])
