"""Build a `Config` from YAML files and dotted overrides, checking every key and type.

Precedence: dataclass defaults < YAML files (left to right) < `dotted.key=value` overrides. A file or
override that sets `algorithm.name` first resets the algorithm section to that preset (see `apply_preset`).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from ascent.config.errors import ConfigError
from ascent.config.presets import ALGORITHM_PRESETS, preset_section
from ascent.config.schema import Config


def load_config(paths: list[str | Path] = (), overrides: list[str] = ()) -> Config:
    """Merge YAML files and `key=value` overrides onto the defaults, then validate."""
    from ascent.config.validation import validate_config

    layers = [_read_yaml(Path(path)) for path in paths] + [parse_override(override) for override in overrides]
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = _deep_merge(apply_preset(merged, layer), layer)
    config = from_dict(Config, merged)
    validate_config(config)
    return config


def apply_preset(merged: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """When `layer` names a preset (algorithm.name), replace the algorithm section built so far by the preset's.

    So `ascent train recipe.yaml algorithm.name=ppo` is PPO whatever algorithm keys recipe.yaml set, while
    keys given next to the name, or after it, still override the preset.
    """
    algorithm = layer.get("algorithm")
    name = algorithm.get("name") if isinstance(algorithm, dict) else None
    if name is None:
        return merged
    if name not in ALGORITHM_PRESETS:
        close = difflib.get_close_matches(str(name), list(ALGORITHM_PRESETS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"algorithm.name={name!r} is not one of: {', '.join(ALGORITHM_PRESETS)}.{hint}")
    return {**merged, "algorithm": preset_section(name)}


def parse_override(text: str) -> dict[str, Any]:
    """`trainer.steps=3` -> {"trainer": {"steps": 3}}; the value is parsed as YAML, else kept as text."""
    key, sep, raw_value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"Override {text!r} is not of the form dotted.key=value (e.g. trainer.steps=3).")
    try:
        value = yaml.safe_load(raw_value) if raw_value.strip() else None
    except yaml.YAMLError:  # not YAML (e.g. "{a}{op}{b}="): take the text as it is
        value = raw_value
    nested: dict[str, Any] = {}
    node = nested
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return nested


def from_dict(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """Instantiate dataclass `cls` from a nested dict; unknown keys and wrong types raise ConfigError."""
    if not isinstance(values, dict):
        raise ConfigError(f"'{prefix.rstrip('.') or 'config'}' must be a mapping, got {type(values).__name__}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(_unknown_key_message(_first_leaf(prefix + str(key), value)))
        kwargs[key] = _coerce(hints[key], value, prefix + key)
    return cls(**kwargs)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def to_yaml(config: Any) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False, default_flow_style=None)


def all_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Every valid dotted key of the tree, leaves and sections alike."""
    keys = []
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        keys.append(prefix + f.name)
        if dataclasses.is_dataclass(hint):
            keys.extend(all_keys(hint, prefix + f.name + "."))
    return keys


def _first_leaf(key: str, value: Any) -> str:
    """`trainr` with value {"steps": 3} -> `trainr.steps`: the full key the user wrote."""
    while isinstance(value, dict) and len(value) == 1:
        ((child, value),) = value.items()
        key = f"{key}.{child}"
    return key


def _unknown_key_message(key: str) -> str:
    candidates = all_keys()
    leaf = key.rsplit(".", 1)[-1]
    by_leaf: dict[str, str] = {}
    for candidate in candidates:  # a leaf name in several sections suggests the first (optim.lr, not critic.lr)
        by_leaf.setdefault(candidate.rsplit(".", 1)[-1], candidate)
    # A valid key in the wrong section (algorithm.lr -> optim.lr) first, then the nearest spelling.
    matches = [by_leaf[leaf]] if leaf in by_leaf else difflib.get_close_matches(key, candidates, n=1, cutoff=0.5)
    if not matches:  # a misspelt section: compare the last part against keys of any section
        matches = [by_leaf[m] for m in difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.6)]
    hint = f" Did you mean '{matches[0]}'?" if matches else ""
    return f"Unknown config key '{key}'.{hint} (`ascent train CONFIG --dry-run` prints every key.)"


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value if value is not None else {}, key + ".")
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [option for option in options if option is not type(None)]
        return _coerce(inner, value, key)
    if origin is list:
        (inner,) = typing.get_args(hint)
        items = value if isinstance(value, list) else [value]  # a single string is a one-item list
        return [_coerce(inner, item, f"{key}[{i}]") for i, item in enumerate(items)]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads `1e-3` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if hint in (int, float, str, bool) and (type(value) is not hint):
        raise ConfigError(f"'{key}' must be {hint.__name__}, got {value!r} ({type(value).__name__}).")
    return value


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"Config file '{path}' does not exist.")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"Config file '{path}' is not valid YAML: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"Config file '{path}' must hold a mapping of sections, got {type(loaded).__name__}.")
    return loaded
