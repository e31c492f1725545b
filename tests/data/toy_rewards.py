"""Reward functions for end-to-end tests (verl's compute_score signature)."""


def count_sevens(data_source, solution_str, ground_truth, extra_info=None):
    """Trivially learnable: the share of characters that are '7'."""
    return solution_str.count("7") / max(1, len(solution_str))


def sometimes_raises(data_source, solution_str, ground_truth, extra_info=None):
    if "1" in solution_str:
        raise RuntimeError("this reward function is broken on purpose")
    return 0.5


def sevens_on_odd_answers(data_source, solution_str, ground_truth, extra_info=None):
    """Constant (0) for prompts whose answer is even, so about half the groups carry no signal."""
    if int(ground_truth) % 2 == 0:
        return 0.0
    return count_sevens(data_source, solution_str, ground_truth, extra_info)


def sevens_with_components(data_source, solution_str, ground_truth, extra_info=None):
    """count_sevens as a dict result: the score plus named components."""
    return {
        "score": count_sevens(data_source, solution_str, ground_truth),
        "sevens": float(solution_str.count("7")),
        "characters": float(len(solution_str)),
    }
