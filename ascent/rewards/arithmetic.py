"""Scorer of the built-in arithmetic task, in verl's `compute_score` form."""

from __future__ import annotations

import re
from typing import Any

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_INTEGER = re.compile(r"-?[0-9]+")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in `text` (no nested braces), or None."""
    matches = _BOXED.findall(text)
    return matches[-1].strip() if matches else None


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> dict:
    """1.0 when the last boxed answer equals the ground truth as an integer, else 0.0."""
    answer = last_boxed(solution_str)
    correct = answer is not None and _INTEGER.fullmatch(answer) is not None and int(answer) == int(ground_truth)
    return {"score": float(correct), "accuracy": float(correct), "format": float(answer is not None)}
