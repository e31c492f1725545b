"""Reading prompt rows from Parquet/JSONL files in verl's layout or the simple one, with precise errors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """Bad input data; the message names the file, the row and the column."""


@dataclass
class PromptRecord:
    """One prompt. Both row layouts are normalised to this.

    verl layout: data_source, prompt (list of {role, content}), ability, reward_model {ground_truth}, extra_info.
    simple layout: prompt (string), answer, and optionally data_source, response, extra_info.
    """

    messages: list[dict[str, str]]  # chat messages; a plain prompt string becomes one user message
    ground_truth: Any
    data_source: str
    extra_info: dict[str, Any] = field(default_factory=dict)
    response: str | None = None  # the target text for SFT
    prompt_token_ids: list[int] = field(default_factory=list)  # filled by `tokenize_records`


DEFAULT_DATA_SOURCE = "custom"


def read_records(path: str | Path) -> list[PromptRecord]:
    """All rows of one Parquet or JSONL file as PromptRecords; DataError on anything malformed."""
    path = Path(path)
    rows = _read_rows(path)
    if not rows:
        raise DataError(f"{path}: the dataset is empty (no rows).")
    return [parse_row(row, path, index) for index, row in enumerate(rows)]


def parse_row(row: dict[str, Any], path: Path, index: int) -> PromptRecord:
    where = f"{path} row {index}"
    if "prompt" not in row:
        raise DataError(f"{where}: missing column 'prompt' (columns found: {', '.join(sorted(row)) or 'none'}).")
    data_source = row.get("data_source") or DEFAULT_DATA_SOURCE
    if not isinstance(data_source, str):
        raise DataError(f"{where}, column 'data_source': expected a string, got {type(data_source).__name__}.")
    extra_info = row.get("extra_info") or {}
    if not isinstance(extra_info, dict):
        raise DataError(f"{where}, column 'extra_info': expected a mapping, got {type(extra_info).__name__}.")
    messages = _parse_prompt(row["prompt"], where)
    response = row.get("response")
    if response is not None and not isinstance(response, str):
        raise DataError(f"{where}, column 'response': expected a string, got {type(response).__name__}.")
    return PromptRecord(
        messages=messages,
        ground_truth=_parse_ground_truth(row, where),
        data_source=data_source,
        extra_info=extra_info,
        response=response,
    )


def _parse_prompt(prompt: Any, where: str) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt:
        for turn, message in enumerate(prompt):
            if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
                raise DataError(f"{where}, column 'prompt': message {turn} has no string 'role' ({message!r}).")
            if not isinstance(message.get("content"), str):
                raise DataError(f"{where}, column 'prompt': message {turn} has no string 'content' ({message!r}).")
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise DataError(
        f"{where}, column 'prompt': expected a string or a non-empty list of chat messages "
        f"[{{'role': ..., 'content': ...}}], got {type(prompt).__name__} {prompt!r:.80}."
    )


def _parse_ground_truth(row: dict[str, Any], where: str) -> Any:
    if "reward_model" in row:
        reward_model = row["reward_model"]
        if not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None:
            raise DataError(f"{where}, column 'reward_model': expected a mapping with a non-null 'ground_truth'.")
        return reward_model["ground_truth"]
    if "answer" in row:
        if row["answer"] is None:
            raise DataError(f"{where}, column 'answer': is null; every row needs the answer its reward checks.")
        return row["answer"]
    raise DataError(
        f"{where}: missing column 'answer' (simple layout) or 'reward_model.ground_truth' (verl layout); "
        f"columns found: {', '.join(sorted(row))}."
    )


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataError(f"Data file '{path}' does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as error:  # pyarrow raises several types for corrupt files
            raise DataError(f"{path}: cannot read as Parquet: {error}") from error
    if suffix in (".jsonl", ".json"):
        return _read_json_rows(path)
    raise DataError(f"{path}: unsupported file type '{suffix}'; use .parquet, .jsonl or .json.")


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: invalid JSON: {error}") from error
    else:
        rows = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise DataError(f"{path} line {line_number}: invalid JSON: {error.msg}") from error
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{path} row {index}: expected a JSON object, got {type(row).__name__}.")
    return rows
