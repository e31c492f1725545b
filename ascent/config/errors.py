"""The error type of the config package."""


class ConfigError(ValueError):
    """A user error in the configuration; the message says which key and how to fix it."""
