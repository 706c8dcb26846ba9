"""A locally built Hugging Face checkpoint (byte-level BPE tokenizer with a chat template, tiny Qwen2)."""
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from polo.policy import Policy
from polo.rollout import sample

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "What is two plus three? It is five.",
             "Policies are optimised with rewards.", "def f(x):\n    return x * 2\n"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen_bpe")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe.train_from_iterator(SENTENCES * 4, trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_load_chat_template_sample_and_logp(checkpoint, f32):
    policy = Policy.load(checkpoint, chat_template=True, dtype=torch.float64)  # two model paths below (Float32)
    assert policy.eos_token_id == policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts = ["What is two plus three?", "Hi"]
    ids, mask = policy.encode_prompts(prompts)
    assert mask[:, -1].all() and not mask[1, 0]
    texts = [policy.tokenizer.decode(row[m.bool()]) for row, m in zip(ids, mask)]
    assert texts == [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in prompts]
    out = sample(policy, ids, mask, max_new_tokens=8, temperature=0.8, generator=torch.Generator().manual_seed(0))
    texts = policy.decode(out.response_ids, out.response_mask)
    keep = out.response_mask.bool() & (out.response_ids != policy.eos_token_id)
    assert texts == [policy.tokenizer.decode(r[k], skip_special_tokens=True) for r, k in zip(out.response_ids, keep)]
    logp = policy.forward_logp(ids, mask, out.response_ids, out.response_mask, temperature=0.8)["logp"]
    atol = f32.logp_atol(policy, ids, mask, out.response_ids, out.response_mask, temperature=0.8)  # ≈ 1.2e-5
    torch.testing.assert_close(logp, out.logp, atol=atol, rtol=0)
