"""Typed configuration: dataclasses, YAML loading with dotted overrides, validation. Imports no torch."""

from ascent.config.errors import ConfigError
from ascent.config.loader import load_config, to_yaml
from ascent.config.schedule import Schedule, derive_schedule
from ascent.config.schema import Config

__all__ = ["Config", "ConfigError", "Schedule", "derive_schedule", "load_config", "to_yaml"]
