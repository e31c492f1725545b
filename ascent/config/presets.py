"""Named algorithms as presets: `algorithm.name=dapo` resets the whole `algorithm` section to the
dataclass defaults plus these keys; keys given next to the name, or after it, still win.

Every preset is the same trainer with different estimators, losses and filters; docs/algorithms.md
explains each value and where it differs from verl.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ascent.config.schema import AlgorithmConfig

_NO_KL = {"coef": 0.0}
_OUTCOME = {"advantage_estimator": "grpo", "std_normalize": True, "kl": _NO_KL}

ALGORITHM_PRESETS: dict[str, dict[str, Any]] = {
    "ppo": {
        "advantage_estimator": "gae",
        "gamma": 1.0,
        "lam": 1.0,
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "token-mean",
        "kl": _NO_KL,
    },
    "grpo": {
        "advantage_estimator": "grpo",
        "std_normalize": True,
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "seq-mean-token-mean",
        "kl": {"coef": 0.04, "estimator": "k3", "placement": "loss"},
    },
    "dr_grpo": {
        **_OUTCOME,
        "std_normalize": False,
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "seq-mean-token-sum-norm",
    },
    "dapo": {
        **_OUTCOME,
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "loss_aggregation": "token-mean",
        "group_filter": "dynamic",
        "overlong_buffer_fraction": 0.2,
        "overlong_penalty": 1.0,
    },
    "gspo": {
        **_OUTCOME,
        "policy_loss": "gspo",
        "clip_low": 3e-4,
        "clip_high": 4e-4,
        "loss_aggregation": "seq-mean-token-mean",
    },
    "cispo": {**_OUTCOME, "policy_loss": "cispo", "clip_low": 1.0, "clip_high": 0.28, "loss_aggregation": "token-mean"},
    "gmpo": {
        **_OUTCOME,
        "policy_loss": "gmpo",
        "clip_low": 0.4,
        "clip_high": 0.4,
        "loss_aggregation": "seq-mean-token-mean",
    },
    "sapo": {
        **_OUTCOME,
        "policy_loss": "sapo",
        "sapo_tau_positive": 1.0,
        "sapo_tau_negative": 1.05,
        "loss_aggregation": "seq-mean-token-mean",
    },
    "rloo": {
        "advantage_estimator": "rloo",
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "token-mean",
        "kl": _NO_KL,
    },
    "reinforce_pp": {
        "advantage_estimator": "reinforce_pp",
        "gamma": 1.0,
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "token-mean",
        "kl": {"coef": 0.01, "estimator": "k1", "placement": "reward"},
    },
    "reinforce_pp_baseline": {
        "advantage_estimator": "reinforce_pp_baseline",
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "token-mean",
        "kl": {"coef": 0.01, "estimator": "k2", "placement": "loss"},
    },
    "remax": {
        "advantage_estimator": "remax",
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "token-mean",
        "kl": _NO_KL,
    },
    "opo": {
        "advantage_estimator": "opo",
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "token-mean",
        "kl": _NO_KL,
    },
    "gpg": {
        "advantage_estimator": "gpg",
        "std_normalize": False,
        "policy_loss": "gpg",
        "loss_aggregation": "token-mean",
        "kl": _NO_KL,
    },
    "skywork_or1": {
        **_OUTCOME,
        "policy_loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "loss_aggregation": "token-mean",
        "group_filter": "drop",
        "entropy": {"adaptive": True, "coef": 0.0, "target": 0.2, "delta": 1e-4, "max_coef": 0.005},
    },
}


def preset_section(name: str) -> dict[str, Any]:
    """The complete `algorithm` section of preset `name`: defaults overlaid with the preset's keys."""
    section = dataclasses.asdict(AlgorithmConfig())
    for key, value in ALGORITHM_PRESETS[name].items():
        section[key] = {**section[key], **value} if isinstance(value, dict) else value
    return {**section, "name": name}
