"""How a worker-group call is cut across data-parallel ranks and put back together: pure functions.

`split` methods get their batch arguments partitioned, balanced by token count: a Trajectories batch into
equal-size parts (so that every rank runs the same number of forward/backward passes and the FSDP
collectives line up; a batch that does not divide is padded with copies of its shortest row that carry no
response tokens, and their results are dropped), a list of prompts into parts of at most ceil(n / ranks).
`split-mini-batches` methods (updates) balance each consecutive mini-batch separately, so that a rank's
k-th share of its rows is its part of the k-th mini-batch, and an update sees the same samples as in one
process. The results come back in the caller's order. `all` methods get the same arguments on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ascent.rollout.trajectories import Trajectories, concat_trajectories

SPLIT, SPLIT_MINI_BATCHES, ALL = "split", "split-mini-batches", "all"


def balanced_partition(weights: list[int], num_parts: int, equal_sizes: bool = True) -> list[list[int]]:
    """Indices 0..n-1 in `num_parts` parts, with sums of weights as even as a greedy pass makes them
    (heaviest first, each to the lightest part not yet full). With `equal_sizes` every part holds exactly
    n / num_parts items; without, at most ceil(n / num_parts). Each part is sorted."""
    if equal_sizes and len(weights) % num_parts:
        raise ValueError(f"{len(weights)} items do not split evenly over {num_parts} ranks")
    capacity = -(-len(weights) // num_parts)
    parts: list[list[int]] = [[] for _ in range(num_parts)]
    sums = [0] * num_parts
    for index in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        part = min((p for p in range(num_parts) if len(parts[p]) < capacity), key=lambda p: (sums[p], p))
        parts[part].append(index)
        sums[part] += weights[index]
    return [sorted(part) for part in parts]


@dataclass
class SplitCall:
    """The per-rank arguments of one split call, and what is needed to put the results back together."""

    args_per_rank: list[tuple]
    parts: list[list[int]]
    prompts_split: bool  # the batch was a list of prompts (generate): results are Trajectories per prompt
    token_ratio: float  # max / min tokens over the ranks
    num_items: int  # rows of the caller's batch; parts index rows >= num_items are padding


def split_arguments(args: tuple, num_ranks: int, mini_batch_size: int = 0) -> SplitCall:
    """Partition the first Trajectories or list argument by token count; lists of the same length are cut
    the same way (e.g. prompts and their seeds); everything else goes to every rank unchanged. With
    `mini_batch_size`, each consecutive block of that many rows of a Trajectories batch is balanced on its
    own, and every rank's part lists its rows block by block."""
    batch = next((a for a in args if isinstance(a, (Trajectories, list))), None)
    if batch is None:
        raise ValueError("a split call needs a Trajectories or list argument")
    num_items = len(batch)
    if isinstance(batch, Trajectories):
        padded = pad_to_multiple(batch, num_ranks)
        args = tuple(padded if arg is batch else arg for arg in args)
        weights = (padded.prompt_mask.sum(-1) + padded.response_mask.sum(-1)).tolist()
        block = mini_batch_size or len(padded)
        parts = [[] for _ in range(num_ranks)]
        for start in range(0, len(padded), block):
            block_parts = balanced_partition(weights[start : start + block], num_ranks)
            for part, block_part in zip(parts, block_parts, strict=True):
                part += [start + index for index in block_part]
    else:  # prompts to generate from: no collectives there, so ranks may take unequal shares (or none)
        weights = [len(prompt) for prompt in batch]
        parts = [part for part in balanced_partition(weights, num_ranks, equal_sizes=False) if part]
    args_per_rank = []
    for part in parts:
        args_per_rank.append(tuple(_cut(arg, part, len(weights)) for arg in args))
    sums = [sum(weights[i] for i in part) for part in parts]
    return SplitCall(args_per_rank, parts, isinstance(batch, list), max(sums) / max(min(sums), 1), num_items)


def pad_to_multiple(batch: Trajectories, multiple: int) -> Trajectories:
    """`batch` with rows appended until its length divides by `multiple`: copies of its shortest row whose
    response and loss masks are zero, so they add nothing to a loss, a normaliser or a metric."""
    missing = -len(batch) % multiple
    if not missing:
        return batch
    shortest = int((batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)).argmin())
    padded = batch.select(list(range(len(batch))) + [shortest] * missing)  # every field, advantages included
    padded.response_mask[len(batch) :] = 0
    padded.loss_mask[len(batch) :] = 0
    return padded


def _cut(arg: Any, part: list[int], length: int) -> Any:
    if isinstance(arg, Trajectories) and len(arg) == length:
        return arg.select(part)
    if isinstance(arg, list) and len(arg) == length:
        return [arg[i] for i in part]
    return arg


def gather_results(results: list[Any], call: SplitCall) -> Any:
    """Put per-rank results back in the caller's order. Trajectories from a prompt split get their group ids
    mapped back to the caller's prompt indices; tensors are rows; tuples are gathered element-wise; dicts
    (metrics the workers already reduced over ranks) and None come from rank 0."""
    first = results[0]
    if isinstance(first, tuple):
        return tuple(gather_results([result[i] for result in results], call) for i in range(len(first)))
    if isinstance(first, Trajectories) and call.prompts_split:
        for result, part in zip(results, call.parts, strict=True):
            result.group_ids = torch.tensor(part)[result.group_ids]
        merged = concat_trajectories(results)
        return merged.select(torch.argsort(merged.group_ids, stable=True))
    order = torch.argsort(torch.tensor([i for part in call.parts for i in part]))[: call.num_items]  # no padding
    if isinstance(first, Trajectories):
        return concat_trajectories(results).select(order)
    if isinstance(first, torch.Tensor):
        return torch.cat(results)[order]
    return first
