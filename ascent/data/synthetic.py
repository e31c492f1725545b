"""Built-in verifiable tasks generated in memory, so the demo and tests need no download."""

from __future__ import annotations

import random
from collections.abc import Sequence

from ascent.data.records import PromptRecord

ARITHMETIC_SOURCE = "ascent/arithmetic"


DEFAULT_QUESTION = "What is {a} {op} {b}? Answer in \\boxed{{}}."


def arithmetic_records(
    count: int,
    seed: int,
    min_digits: int = 1,
    max_digits: int = 2,
    operations: Sequence[str] = ("+", "-"),
    question_format: str = DEFAULT_QUESTION,
) -> list[PromptRecord]:
    """`a op b` with operands of min..max digits; the answer goes in \\boxed{}; `response` is the SFT target."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        a, b = (_number(rng, min_digits, max_digits) for _ in range(2))
        operation = rng.choice(operations)
        answer = a + b if operation == "+" else a - b
        records.append(
            PromptRecord(
                messages=[{"role": "user", "content": question_format.format(a=a, op=operation, b=b)}],
                ground_truth=str(answer),
                data_source=ARITHMETIC_SOURCE,
                response=f"\\boxed{{{answer}}}",
            )
        )
    return records


def _number(rng: random.Random, min_digits: int, max_digits: int) -> int:
    digits = rng.randint(min_digits, max_digits)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def synthetic_split(
    num_train: int,
    num_val: int,
    seed: int,
    min_digits: int,
    max_digits: int,
    operations: Sequence[str] = ("+", "-"),
    question_format: str = DEFAULT_QUESTION,
) -> tuple[list[PromptRecord], list[PromptRecord]]:
    """Train and validation sets with no validation question among the training ones, so validation
    measures generalisation. With a small problem space (one-digit operands: 200 questions), training
    draws with repetition from what remains after the validation questions are set aside."""
    val = _distinct(arithmetic_records(num_val * 4, seed + 1, min_digits, max_digits, operations, question_format))[
        :num_val
    ]
    held_out = {record.messages[0]["content"] for record in val}
    train: list[PromptRecord] = []
    attempt = 0
    while len(train) < num_train and attempt < 100:
        batch = arithmetic_records(
            num_train, seed + 1000 * attempt, min_digits, max_digits, operations, question_format
        )
        train += [record for record in batch if record.messages[0]["content"] not in held_out]
        attempt += 1
    if not train:
        raise ValueError("data.synthetic: every question is in the validation set; lower num_val or add digits.")
    return train[:num_train], val


def _distinct(records: list[PromptRecord]) -> list[PromptRecord]:
    seen: dict[str, PromptRecord] = {}
    for record in records:
        seen.setdefault(record.messages[0]["content"], record)
    return list(seen.values())
