import math
import os
from pathlib import Path

import pytest
import torch

THREADS = int(os.environ.get("POLO_TEST_THREADS", "1"))
"""torch intra-op threads of every test; ``POLO_TEST_THREADS=2 pytest`` runs the suite threaded (float32
reductions then split differently, which the tolerances below must absorb)."""
torch.set_num_threads(THREADS)


def pytest_report_header(config):
    return f"torch threads: {THREADS} (POLO_TEST_THREADS)"


@pytest.fixture(autouse=True)
def torch_threads():
    """Re-apply ``THREADS`` before each test: training code run in a test sets its own (``train.threads``)."""
    torch.set_num_threads(THREADS)


# Overrides that shrink any recipe to a seconds-long run on the built-in model.
TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=1", "model.tiny.num_heads=2",
    "model.tiny.intermediate_size=64",
    "warm_start.steps=40", "warm_start.examples=200",
    "rollout.prompts_per_step=4",
    "train.steps=3", "train.eval_size=16", "train.train_pool=200", "train.eval_every=3",
    "train.save_every=3", f"train.threads={THREADS}",  # the trainer sets torch's threads from it
]


VLLM_RECIPES = {"grpo_vllm": ["model.tiny.num_heads=1"]}
"""Recipes that generate in vLLM, and what they need on top of TINY: vLLM's CPU attention serves head sizes of
32 and more (TINY's hidden 32 over 2 heads is 16)."""


TEACHER_RECIPES = {name: ["roles.teacher.warm_start={steps: 60, target_accuracy: null}"] for name in ("gkd", "kepo")}
"""Recipes whose teacher is the built-in model trained longer (up to 4000 warm-start steps, minutes): under TINY a
60-step teacher (the student's warm start has 40)."""


LABELLED = Path(__file__).parent / "train" / "data" / "labelled_addition.jsonl"
"""Addition problems 0..9 + 0..9 with the ``label`` column VULPO reads (``vul`` for an odd sum, else ``safe``)."""
VULPO_TOY = [
    f"task={{name: jsonl, path: {LABELLED}}}",
    "roles.judge={backend: causal, criteria: [{name: verdict, template: '{prompt}{response} right?'}, "
    "{name: localisation, template: '{prompt}{response} where?'}, "
    "{name: semantic, template: '{prompt}{response} why?'}]}",
    "rewards=[{name: correct}]", "advantage.verdict_reward=correct", "advantage.format_reward=null",
    "warm_start.steps=150", "rollout.prompts_per_step=8",
]
"""vulpo on a labelled JSONL file with a three-criterion causal judge (the frozen warm-started policy) in place of
the shipped rule judge, the verdict from the task's verifier (the tiny judge says " No" to everything, so
every group would be degenerate), no format reward (the tiny model never writes <think> blocks) and 150
warm-start steps and 8 prompts a step, so that some groups hold right and wrong answers (after 40 steps ~none
is right)."""


def recipe_extras(name: str) -> list[str]:
    """Overrides recipe ``name`` needs on top of TINY, sizes only: every shipped recipe runs as shipped (a vLLM recipe
    skips where vllm is not installed)."""
    if name in VLLM_RECIPES:
        pytest.importorskip("vllm")
    return VLLM_RECIPES.get(name, []) + TEACHER_RECIPES.get(name, [])


@pytest.fixture(scope="session", autouse=True)
def polo_cache(tmp_path_factory):
    """Warm starts are cached once per test session, never in the user's cache."""
    path = os.environ.get("POLO_CACHE") or str(tmp_path_factory.mktemp("polo_cache"))
    os.environ["POLO_CACHE"] = path
    return path


@pytest.fixture
def tiny():
    return list(TINY)


class Float32:
    """Tolerances that float32 can promise, from the magnitudes involved.

    A float32 rounding errs by at most half an ulp (``EPS`` = 2⁻²³ ≈ 1.2e-7, relative). A kernel computing
    the same value another way (another summation order, SIMD width or thread split) differs by a few ulps
    (``ULPS``) of the largest magnitude it handles, and by √n ulps more for a sum of n terms.

    A transformer is no such single kernel: its softmaxes (attention) amplify rounding by the size of their
    scores, so two kernel paths through a float32 model can differ by far more than a few ulps of its logits
    (measured: 60 ulps of a logit of 0.4 with LoRA-inflated attention). Tests comparing two paths through a
    model therefore run it in float64 (``policy.double()``): the paths then agree to ~1e-13, and the float32
    results (polo casts logits to float32) differ only by the float32 steps after the model.
    """

    EPS = torch.finfo(torch.float32).eps
    ULPS = 4  # "a few ulps"

    @classmethod
    def atol(cls, magnitude, terms: int = 1) -> float:
        """A few ulps of ``magnitude``, times √``terms`` for a sum of that many terms."""
        magnitude = magnitude.detach() if isinstance(magnitude, torch.Tensor) else magnitude
        return cls.ULPS * cls.EPS * float(magnitude) * math.sqrt(terms)

    @classmethod
    def logp_atol(cls, policy, prompt_ids, prompt_mask, response_ids, response_mask, temperature=1.0) -> float:
        """Response log-probs of one float64 model computed by two paths (sampler vs forward, shared vs plain
        prompt, alone vs in a padded batch).

        Both paths cast float64 logits that agree to ~1e-13 to float32 (equal, or 1 ulp apart), then compute
        ``z_tok − logsumexp(z)``, ``z = logits / T``, with their own float32 kernels: a few ulps of the largest
        magnitude, ``max|z| + ln V`` (the logsumexp), and a few ulps times √V for its sum of V exponentials
        (each ≤ 1) taken in another order.
        """
        from polo.policy.inputs import concat_inputs

        assert next(policy.parameters()).dtype == torch.float64, "compare two paths through a model in float64"
        T = response_ids.shape[1]
        with torch.no_grad():
            logits = policy.model(**concat_inputs(prompt_ids, prompt_mask, response_ids), use_cache=False,
                                  logits_to_keep=T + 1).logits[:, :-1].float()
        z = float(logits.abs().amax(-1)[response_mask.bool()].max()) / temperature
        V = logits.shape[-1]
        return cls.atol(z + math.log(V)) + cls.atol(1.0, V)


@pytest.fixture(scope="session")
def f32():
    """``Float32``: tolerances grounded in float32 rounding (see its docstring)."""
    return Float32


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHAT_SENTENCES = ["The quick brown fox jumps over the lazy dog.", "What is two plus three? It is five.",
                  "Policies are optimised with rewards.", "def f(x):\n    return x * 2\n"]


@pytest.fixture(scope="session")
def chat_checkpoint(tmp_path_factory):
    """``build(max_position_embeddings) -> path``: a local Hugging Face checkpoint (a tiny Qwen2 with a
    byte-level BPE tokenizer trained here and a chat template with any roles), one per context size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    built = {}

    def build(max_position_embeddings: int = 128):
        if max_position_embeddings in built:
            return built[max_position_embeddings]
        path = tmp_path_factory.mktemp(f"qwen_bpe_{max_position_embeddings}")
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        bpe.train_from_iterator(CHAT_SENTENCES * 4, trainers.BpeTrainer(
            vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        tokenizer.chat_template = CHAT_TEMPLATE
        torch.manual_seed(0)
        config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=max_position_embeddings,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        Qwen2ForCausalLM(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        built[max_position_embeddings] = path
        return path

    return build


def noisy_tiny_policy():
    """A tiny policy with large random weights, so that greedy decoding varies and rows stop early (seed 0)."""
    from polo.policy.policy import build_tiny_policy
    from polo.policy.tiny import TinyModelConfig
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64))
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.5)
    return policy
