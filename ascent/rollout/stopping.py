"""Where a response ends: at its first end-of-sequence token, or at the token that completes a stop string.

Both engines end responses with `response_ends`, so their outputs agree; the native engine also asks
`StopStrings.completed` while decoding, to drop a stopped row at once.

Stop strings are matched on decoded text, since a string can be split over tokens in many ways. Decoding every
row at every step would cost more than the decoding itself, so a row is only decoded when its newest token
could have completed a stop string: its text contains the last character of one (or it is a partial
character that the next token completes). Only the last tokens are decoded: enough for the longest stop
string even at one byte per token.
"""

from __future__ import annotations

import torch


class StopStrings:
    """Stop strings, and which tokens could complete one (precomputed once from the vocabulary)."""

    def __init__(self, tokenizer, stops: list[str] | tuple[str, ...]) -> None:
        if any(not stop for stop in stops):
            raise ValueError("rollout.stop: a stop string cannot be empty")
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.tail_tokens = 4 * max(len(stop) for stop in stops) + 4
        last_characters = {stop[-1] for stop in stops}
        texts = tokenizer.batch_decode([[token] for token in range(len(tokenizer))])
        self._could_complete = torch.tensor(
            [not text or "\ufffd" in text or any(c in text for c in last_characters) for text in texts]
        )

    def could_complete(self, tokens: torch.Tensor) -> torch.Tensor:
        """Per token id (any shape): whether it may complete a stop string. Ids past the tokenizer's vocabulary
        (padded embedding rows) are checked like any other."""
        tokens = tokens.cpu()
        known = tokens < len(self._could_complete)
        return ~known | self._could_complete[tokens.clamp(max=len(self._could_complete) - 1)]

    def completed(self, tokens: list[int]) -> bool:
        """Whether the text of `tokens` contains a stop string once its last token is added (the caller checks
        every prefix in order, so that the first hit is where the string was completed)."""
        if not self.could_complete(torch.tensor(tokens[-1:]))[0]:
            return False
        tail = self.tokenizer.decode(tokens[-self.tail_tokens :])
        return any(stop in tail for stop in self.stops)


class StopStringsCache:
    """The `StopStrings` of each set of stop strings an engine was asked for (building one decodes the
    vocabulary once)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.built: dict[tuple[str, ...], StopStrings] = {}

    def get(self, stops: tuple[str, ...]) -> StopStrings | None:
        if not stops:
            return None
        if stops not in self.built:
            self.built[stops] = StopStrings(self.tokenizer, stops)
        return self.built[stops]


def response_ends(
    generated: torch.Tensor, eos_ids: list[int], stop_strings: StopStrings | None
) -> list[tuple[int, str]]:
    """(length, finish reason) of each row of generated tokens [B, G]: "stop" when it ends at an EOS token (kept)
    or at the token that completes a stop string (kept), else "length" (the whole row)."""
    ends = []
    is_eos = torch.isin(generated, torch.tensor(eos_ids, device=generated.device)).cpu()
    could_complete = stop_strings.could_complete(generated) if stop_strings is not None else None
    for index, row in enumerate(generated.tolist()):
        eos_at = is_eos[index].nonzero()
        end = int(eos_at[0]) + 1 if len(eos_at) else None
        if could_complete is not None:
            for position in could_complete[index, : end or len(row)].nonzero().flatten().tolist():
                if stop_strings.completed(row[: position + 1]):
                    end = position + 1
                    break
        ends.append((end, "stop") if end is not None else (len(row), "length"))
    return ends
