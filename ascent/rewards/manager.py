"""Score a batch of responses: call each sample's reward function, collect components, count failures."""

from __future__ import annotations

import logging
import math
import traceback
from dataclasses import dataclass
from numbers import Real

from ascent.data.records import PromptRecord
from ascent.rewards.loader import RewardFunction

logger = logging.getLogger(__name__)


@dataclass
class ScoredBatch:
    scores: list[float]
    components: dict[str, list[float]]  # named parts of dict results; NaN where a sample did not report it
    errors: list[str | None]  # the exception type where the reward function raised or returned something unusable

    @property
    def failed(self) -> list[bool]:
        return [error is not None for error in self.errors]

    @property
    def num_errors(self) -> int:
        return sum(self.failed)

    @property
    def error_counts(self) -> dict[str, int]:
        """Failed samples by exception type."""
        counts: dict[str, int] = {}
        for error in self.errors:
            if error is not None:
                counts[error] = counts.get(error, 0) + 1
        return counts

    def sample_components(self, row: int) -> dict[str, float]:
        """Sample `row`'s score and the named components it reported."""
        parts = {name: values[row] for name, values in sorted(self.components.items()) if not math.isnan(values[row])}
        return {"score": self.scores[row], **parts}

    def select(self, rows: list[int]) -> ScoredBatch:
        """The samples at `rows`, in that order."""
        return ScoredBatch(
            scores=[self.scores[row] for row in rows],
            components={name: [values[row] for row in rows] for name, values in self.components.items()},
            errors=[self.errors[row] for row in rows],
        )

    @staticmethod
    def concat(batches: list[ScoredBatch]) -> ScoredBatch:
        """One ScoredBatch for several, in order; a component missing from a batch is NaN there."""
        names = {name for batch in batches for name in batch.components}
        components = {
            name: [v for batch in batches for v in batch.components.get(name, [math.nan] * len(batch.scores))]
            for name in names
        }
        return ScoredBatch(
            scores=[score for batch in batches for score in batch.scores],
            components=components,
            errors=[error for batch in batches for error in batch.errors],
        )


class RewardManager:
    """Calls verl-style `compute_score(data_source, solution_str, ground_truth, extra_info)` per sample.

    A failing call never silently becomes a reward: it is scored `failure_score`, flagged, counted by
    exception type, and the first traceback of each type is logged.
    """

    def __init__(self, functions: dict[str, RewardFunction], failure_score: float = 0.0) -> None:
        self.functions = functions
        self.failure_score = failure_score
        self._reported: set[str] = set()

    def score(self, responses: list[str], records: list[PromptRecord]) -> ScoredBatch:
        results = [self._score_one(response, record) for response, record in zip(responses, records, strict=True)]
        names = sorted({name for parts, _, _ in results for name in parts})
        return ScoredBatch(
            scores=[score for _, score, _ in results],
            components={name: [parts.get(name, math.nan) for parts, _, _ in results] for name in names},
            errors=[error for _, _, error in results],
        )

    def _score_one(self, response: str, record: PromptRecord) -> tuple[dict[str, float], float, str | None]:
        function = self.functions[record.data_source]
        try:
            result = function(record.data_source, response, record.ground_truth, record.extra_info)
            score, parts = _unpack(result)
        except Exception as error:
            kind = type(error).__name__
            if kind not in self._reported:
                self._reported.add(kind)
                logger.error(
                    "reward function %s raised %s on data_source=%r (counted in reward/errors; scored %s). "
                    "First traceback:\n%s",
                    getattr(function, "__name__", function),
                    kind,
                    record.data_source,
                    self.failure_score,
                    traceback.format_exc(),
                )
            return {}, self.failure_score, kind
        return parts, score, None


def _unpack(result) -> tuple[float, dict[str, float]]:
    """float | dict(score=..., **components) -> (score, components); TypeError/ValueError otherwise."""
    if isinstance(result, dict):
        if "score" not in result:
            raise TypeError(f"reward function returned a dict without 'score' (keys: {sorted(result)})")
        parts = {key: float(value) for key, value in result.items() if key != "score" and _is_number(value)}
        score = result["score"]
    else:
        score, parts = result, {}
    if not _is_number(score):
        raise TypeError(f"reward function returned {type(score).__name__} {score!r:.60}; expected a number")
    if not math.isfinite(float(score)):
        raise ValueError(f"reward function returned a non-finite score {score}")
    return float(score), parts


def _is_number(value) -> bool:
    return isinstance(value, (Real, bool)) or (hasattr(value, "item") and isinstance(value.item(), Real))
