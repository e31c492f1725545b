"""Reward functions: built-in scorers by data source, or user code loaded from `path/to/file.py:function`."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

from ascent.config.errors import ConfigError
from ascent.rewards import arithmetic

RewardFunction = Callable[..., "float | dict"]

# Built-in scorers keyed by the `data_source` column of the rows they grade.
BUILTIN_SCORERS: dict[str, RewardFunction] = {
    "ascent/arithmetic": arithmetic.compute_score,
}


def load_function(spec: str) -> RewardFunction:
    """Import `function` from `path/to/file.py:function` (verl's `custom_reward_function` convention)."""
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise ConfigError(f"reward.function={spec!r} must look like path/to/file.py:function_name.")
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"reward.function: file '{path}' does not exist.")
    module_name = f"ascent_user_reward_{abs(hash(path.resolve()))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    module_spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        available = [n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")]
        raise ConfigError(f"reward.function: '{path}' has no function '{name}' (functions: {', '.join(available)}).")
    return function


def resolve_reward_functions(spec: str | None, data_sources: set[str]) -> dict[str, RewardFunction]:
    """One reward function per data source: the user's for all of them, else the built-in scorer."""
    if spec:
        function = load_function(spec)
        return dict.fromkeys(data_sources, function)
    missing = sorted(data_sources - set(BUILTIN_SCORERS))
    if missing:
        raise ConfigError(
            f"No built-in scorer for data_source {', '.join(map(repr, missing))}. "
            "Set reward.function=path/to/file.py:compute_score "
            f"(built-in sources: {', '.join(BUILTIN_SCORERS)})."
        )
    return {source: BUILTIN_SCORERS[source] for source in data_sources}
