"""The vLLM lane's fixtures. Its tests need vLLM, which lives in a venv of its own (`make test-vllm`); each test
module skips itself, with that reason, where vLLM is missing."""

import pytest
import torch

from ascent.config import load_config
from ascent.models.tokenizers import build_char_tokenizer
from ascent.workers.policy import PolicyWorker

# One vLLM engine per test module: starting one takes seconds. Float32 on CPU, so that greedy decoding can be
# compared with the hf engine token for token.
TINY = ["model.path=tiny:qwen2", "model.dtype=float32", "data.synthetic.name=arithmetic", "trainer.device=cpu"]


@pytest.fixture(scope="session")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def policy(tokenizer):
    """A policy worker whose rollout engine is vLLM; its logprobs are recomputed at temperature 0.7."""
    torch.manual_seed(0)
    config = load_config([], [*TINY, "rollout.engine=vllm", "rollout.temperature=0.7"])
    return PolicyWorker(config, tokenizer, torch.device("cpu"), total_steps=10)


@pytest.fixture(scope="session")
def prompts(tokenizer):
    texts = ["What is 1 + 2?", "What is 31 - 4?", "Say hi.", "What is 7 + 70? Answer in \\boxed{}."]
    rendered = [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
        for t in texts
    ]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in rendered]
