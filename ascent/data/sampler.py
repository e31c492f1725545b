"""Seeded, resumable order over a dataset: each epoch is a fresh permutation drawn from (seed, epoch)."""

from __future__ import annotations

import random


class PromptSampler:
    def __init__(self, num_records: int, seed: int = 0, shuffle: bool = True) -> None:
        if num_records <= 0:
            raise ValueError("PromptSampler needs at least one record.")
        self.num_records, self.seed, self.shuffle = num_records, seed, shuffle
        self.epoch, self.position = 0, 0
        self._order = self._order_for(0)

    def _order_for(self, epoch: int) -> list[int]:
        order = list(range(self.num_records))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_indices(self, count: int) -> list[int]:
        """The next `count` record indices, continuing into the next epoch when this one runs out."""
        indices = []
        while len(indices) < count:
            if self.position == self.num_records:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._order_for(self.epoch)
            take = min(count - len(indices), self.num_records - self.position)
            indices.extend(self._order[self.position : self.position + take])
            self.position += take
        return indices

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seed, self.epoch, self.position = state["seed"], state["epoch"], state["position"]
        self._order = self._order_for(self.epoch)
