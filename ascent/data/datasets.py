"""Load the train and validation prompt sets a run needs, from files or a built-in task."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from ascent.config.schema import DataConfig
from ascent.data.prompts import load_prompt_template, tokenize_records
from ascent.data.records import DataError, PromptRecord, read_records
from ascent.data.synthetic import synthetic_split

logger = logging.getLogger(__name__)


@dataclass
class PromptDatasets:
    train: list[PromptRecord]
    val: list[PromptRecord]


def load_prompt_datasets(config: DataConfig, tokenizer) -> PromptDatasets:
    train, val = _load_records(config)
    template = load_prompt_template(config.prompt_template)
    options = dict(template=template, apply_chat_template=config.apply_chat_template)
    train = tokenize_records(train, tokenizer, config.max_prompt_tokens, split="train", **options)
    val = tokenize_records(val, tokenizer, config.max_prompt_tokens, split="val", **options) if val else []
    logger.info("data: %d train prompts, %d validation prompts", len(train), len(val))
    return PromptDatasets(train=train, val=val)


def _load_records(config: DataConfig) -> tuple[list[PromptRecord], list[PromptRecord]]:
    synthetic = config.synthetic
    if synthetic.name:
        return synthetic_split(
            synthetic.num_train,
            synthetic.num_val,
            synthetic.seed,
            min_digits=synthetic.min_digits,
            max_digits=synthetic.max_digits,
            operations=synthetic.operations,
            question_format=synthetic.question_format,
        )
    train = [record for path in config.train_files for record in read_records(path)]
    if config.val_files:
        return train, [record for path in config.val_files for record in read_records(path)]
    if config.val_fraction:
        if len(train) < 2:
            raise DataError(f"data.val_fraction needs at least 2 training rows, found {len(train)}.")
        order = list(range(len(train)))
        random.Random(config.seed).shuffle(order)
        num_val = max(1, int(len(train) * config.val_fraction))
        held_out = set(order[:num_val])
        return [r for i, r in enumerate(train) if i not in held_out], [train[i] for i in sorted(held_out)]
    return train, []
