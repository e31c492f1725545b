"""Splitting a worker-group call over ranks by token count, and putting the results back in order."""

import pytest
import torch

from ascent.controller.dispatch import balanced_partition, gather_results, split_arguments
from ascent.rollout.trajectories import Trajectories, left_pad, right_pad


def test_balanced_partition_gives_equal_sizes_and_even_token_sums():
    weights = [10, 1, 9, 2, 8, 3]
    parts = balanced_partition(weights, 2)
    assert sorted(i for part in parts for i in part) == list(range(6))
    assert [len(part) for part in parts] == [3, 3]
    sums = [sum(weights[i] for i in part) for part in parts]
    assert sums == [15, 18]  # heaviest first to the lighter part: {10, 3, 2} and {9, 8, 1}
    lengths = [(37 * i) % 101 + 20 for i in range(64)]  # 64 samples of 20..120 tokens over 4 ranks
    sums = [sum(lengths[i] for i in part) for part in balanced_partition(lengths, 4)]
    assert max(sums) / min(sums) < 1.02
    with pytest.raises(ValueError, match="do not split evenly over 4 ranks"):
        balanced_partition(weights, 4)


def make_batch(prompt_lengths: list[int], response_lengths: list[int]) -> Trajectories:
    prompt_ids, prompt_mask = left_pad([[7] * n for n in prompt_lengths], 0)
    response_ids, response_mask = right_pad([[5] * n for n in response_lengths], 0)
    return Trajectories(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        loss_mask=response_mask.float(),
        rollout_logprobs=torch.zeros(response_ids.shape),
        group_ids=torch.arange(len(prompt_lengths)),
        finish_reasons=["stop"] * len(prompt_lengths),
    )


def test_split_batch_and_gather_rows_restores_the_callers_order():
    batch = make_batch([3, 1, 4, 1], [5, 9, 2, 6])
    call = split_arguments((batch, 0.5), 2)
    assert [len(args[0]) for args in call.args_per_rank] == [2, 2]
    assert all(args[1] == 0.5 for args in call.args_per_rank)  # non-batch arguments go to every rank
    # each rank returns something per row of its part: its rows' total lengths
    results = [(args[0].prompt_mask.sum(-1) + args[0].response_mask.sum(-1)).float() for args in call.args_per_rank]
    assert gather_results(results, call).tolist() == [8.0, 10.0, 6.0, 7.0]
    assert call.token_ratio == pytest.approx(max(8 + 7, 10 + 6, 8 + 6, 10 + 7) / 15) or call.token_ratio >= 1


def test_split_prompts_maps_group_ids_back_to_the_callers_prompts():
    prompts = [[1] * 5, [2] * 1, [3] * 4, [4] * 2]
    seeds = [50, 51, 52, 53]
    call = split_arguments((prompts, "sampling", seeds), 2)
    results = []
    for rank_prompts, _, rank_seeds in call.args_per_rank:
        # a fake engine: one row per prompt, two samples, the seed as the response
        batch = make_batch([len(p) for p in rank_prompts for _ in range(2)], [1] * (2 * len(rank_prompts)))
        batch.group_ids = torch.arange(len(rank_prompts)).repeat_interleave(2)
        batch.response_ids = torch.tensor([[seed] for seed in rank_seeds for _ in range(2)])
        results.append(batch)
    merged = gather_results(results, call)
    assert merged.group_ids.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert merged.response_ids.squeeze(-1).tolist() == [50, 50, 51, 51, 52, 52, 53, 53]
    assert merged.prompt_mask.sum(-1).tolist() == [5, 5, 1, 1, 4, 4, 2, 2]


def test_metrics_come_from_rank_zero_and_tuples_are_gathered_elementwise():
    batch = make_batch([1, 1], [1, 1])
    call = split_arguments((batch,), 2)
    assert gather_results([{"loss": 1.0}, {"loss": 1.0}], call) == {"loss": 1.0}
    rows = [torch.tensor([[float(part[0])]]) for part in call.parts]
    logprobs, entropy = gather_results([(r, r * 2) for r in rows], call)
    assert logprobs.squeeze(-1).tolist() == [0.0, 1.0] and entropy.squeeze(-1).tolist() == [0.0, 2.0]


def test_prompts_may_split_unevenly_and_a_rank_may_get_none():
    call = split_arguments(([[1] * 3, [2] * 2, [3]],), 2)
    assert sorted(len(args[0]) for args in call.args_per_rank) == [1, 2]
    assert len(split_arguments(([[1] * 3],), 4).args_per_rank) == 1


def test_a_batch_that_does_not_divide_is_padded_with_rows_that_train_nothing():
    batch = make_batch([3, 1, 4, 1, 5], [5, 9, 2, 6, 5])
    batch.advantages = torch.arange(5.0)[:, None].expand(5, 9).clone()
    call = split_arguments((batch,), 2)
    rank_batches = [args[0] for args in call.args_per_rank]
    assert [len(b) for b in rank_batches] == [3, 3]
    assert sum(int(b.loss_mask.sum()) for b in rank_batches) == int(batch.loss_mask.sum())  # padding trains nothing
    assert sum(int(b.response_mask.sum()) for b in rank_batches) == int(batch.response_mask.sum())
    assert all(b.advantages is not None for b in rank_batches)  # update's fields travel with the padding
    results = [b.advantages[:, 0] for b in rank_batches]  # one value per row, padding included
    assert gather_results(results, call).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # padding dropped, order kept


def test_an_update_split_gives_each_rank_its_share_of_every_mini_batch_in_order():
    # 8 samples, mini-batches of 4: rows 0-3 and 4-7. Balancing the whole batch at once could put rows of
    # both mini-batches in one rank's first half; per mini-batch, rank r's k-th half is its part of batch k.
    batch = make_batch([1] * 8, [9, 1, 1, 1, 9, 9, 9, 1])
    call = split_arguments((batch,), 2, mini_batch_size=4)
    for part in call.parts:
        assert all(index < 4 for index in part[:2]) and all(index >= 4 for index in part[2:])
    assert sorted(i for part in call.parts for i in part) == list(range(8))
    whole = split_arguments((batch,), 2)  # compute_logprobs: balanced over the whole batch
    assert any(any(index >= 4 for index in part[:2]) for part in whole.parts)
