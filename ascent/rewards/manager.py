"""Score a batch of responses: call each sample's reward function, collect components, count failures."""

from __future__ import annotations

import logging
import math
import traceback
from dataclasses import dataclass, field
from numbers import Real

from ascent.data.records import PromptRecord
from ascent.rewards.loader import RewardFunction

logger = logging.getLogger(__name__)


@dataclass
class ScoredBatch:
    scores: list[float]
    components: dict[str, list[float]]  # named parts of dict results; NaN where a sample did not report it
    failed: list[bool]  # True where the reward function raised or returned something unusable
    error_counts: dict[str, int] = field(default_factory=dict)  # by exception type

    @property
    def num_errors(self) -> int:
        return sum(self.failed)

    @staticmethod
    def concat(batches: list[ScoredBatch]) -> ScoredBatch:
        """One ScoredBatch for several, in order; a component missing from a batch is NaN there."""
        names = {name for batch in batches for name in batch.components}
        components = {
            name: [v for batch in batches for v in batch.components.get(name, [math.nan] * len(batch.scores))]
            for name in names
        }
        error_counts: dict[str, int] = {}
        for batch in batches:
            for kind, count in batch.error_counts.items():
                error_counts[kind] = error_counts.get(kind, 0) + count
        return ScoredBatch(
            scores=[score for batch in batches for score in batch.scores],
            components=components,
            failed=[failed for batch in batches for failed in batch.failed],
            error_counts=error_counts,
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
        error_counts: dict[str, int] = {}
        for _, _, error in results:
            if error:
                error_counts[error] = error_counts.get(error, 0) + 1
        return ScoredBatch(
            scores=[score for _, score, _ in results],
            components={name: [parts.get(name, math.nan) for parts, _, _ in results] for name in names},
            failed=[error is not None for _, _, error in results],
            error_counts=error_counts,
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
