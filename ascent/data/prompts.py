"""Turning records into prompt token ids: optional Jinja prompt template, chat template, length filter."""

from __future__ import annotations

import logging
from pathlib import Path

import jinja2

from ascent.data.records import DataError, PromptRecord

logger = logging.getLogger(__name__)


def load_prompt_template(path: str | None) -> jinja2.Template | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise DataError(f"data.prompt_template: file '{path}' does not exist.")
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(Path(path).read_text())


def render_prompt(
    record: PromptRecord, tokenizer, template: jinja2.Template | None = None, apply_chat_template: bool = True
) -> str:
    """The text the model is conditioned on. The template, if any, rewrites the last user message and sees
    `prompt` (that message), `data_source` and `extra_info`."""
    messages = [dict(message) for message in record.messages]
    if template is not None:
        user_turns = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if not user_turns:
            raise DataError(f"data.prompt_template needs a user message; this prompt has none: {messages!r:.100}")
        try:
            messages[user_turns[-1]]["content"] = template.render(
                prompt=messages[user_turns[-1]]["content"],
                data_source=record.data_source,
                extra_info=record.extra_info,
            )
        except jinja2.TemplateError as error:
            raise DataError(
                f"data.prompt_template failed: {error} (it can use prompt, data_source, extra_info)"
            ) from error
    if apply_chat_template and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "\n".join(message["content"] for message in messages)


def tokenize_records(
    records: list[PromptRecord],
    tokenizer,
    max_prompt_tokens: int,
    template: jinja2.Template | None = None,
    apply_chat_template: bool = True,
    split: str = "train",
) -> list[PromptRecord]:
    """Fill `prompt_token_ids`; drop (and log the count of) prompts longer than `max_prompt_tokens`."""
    kept = []
    for record in records:
        text = render_prompt(record, tokenizer, template, apply_chat_template)
        record.prompt_token_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(record.prompt_token_ids) <= max_prompt_tokens:
            kept.append(record)
    dropped = len(records) - len(kept)
    if dropped:
        logger.warning(
            "%s: dropped %d of %d prompts longer than data.max_prompt_tokens=%d",
            split,
            dropped,
            len(records),
            max_prompt_tokens,
        )
    if records and not kept:
        raise DataError(
            f"{split}: all {len(records)} prompts are longer than data.max_prompt_tokens={max_prompt_tokens}; "
            "raise it or shorten the prompts."
        )
    return kept
