import pytest
import torch

from ascent.config import load_config
from ascent.models.tokenizers import build_char_tokenizer
from ascent.workers.policy import PolicyWorker

TINY = ["model.path=tiny:llama-micro", "data.synthetic.name=arithmetic", "trainer.device=cpu"]


def make_config(*overrides: str):
    return load_config([], [*TINY, *overrides])


@pytest.fixture(scope="session")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture
def make_policy(tokenizer):
    def make(*overrides: str) -> PolicyWorker:
        torch.manual_seed(0)
        return PolicyWorker(make_config(*overrides), tokenizer, torch.device("cpu"), total_steps=10)

    return make


@pytest.fixture
def prompts(tokenizer):
    texts = ["What is 1 + 2?", "What is 31 - 4?", "Say hi.", "What is 7 + 70? Answer in \\boxed{}."]
    rendered = [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
        for t in texts
    ]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in rendered]
