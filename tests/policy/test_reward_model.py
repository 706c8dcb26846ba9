"""Reward models (polo.policy.reward_model): a causal LM's trunk with a zero scalar head, saved as a Hugging Face
sequence classifier that transformers loads without polo and that gives the same scores."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from polo.core.registry import ConfigError
from polo.policy.reward_model import RM_INFO, RewardModel, pair_outcomes
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer

SMALL = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
PROMPTS = ["12+30=", "7+8=", "99+1="]
RESPONSES = ["42", "16", "100"]


@pytest.fixture
def rm():
    torch.manual_seed(0)
    model = RewardModel.builtin(SMALL)
    with torch.no_grad():  # a non-zero head, so scores differ per text
        model.model.score.weight.normal_()
    return model


def test_a_reward_model_from_a_causal_lm_has_its_trunk_and_a_zero_head():
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    causal = build_tiny_model(SMALL, tokenizer)
    rm = RewardModel.from_causal_lm(causal, tokenizer)
    assert type(rm.model).__name__ == "LlamaForSequenceClassification" and rm.model.config.num_labels == 1
    for name, value in causal.model.state_dict().items():
        assert torch.equal(rm.model.model.state_dict()[name], value), name
    assert rm.score(PROMPTS, RESPONSES).tolist() == [0.0, 0.0, 0.0]  # every reward starts at 0
    assert rm.model.config.pad_token_id == tokenizer.pad_token_id


def test_saved_folder_loads_with_transformers_and_gives_the_same_scores(rm, tmp_path):
    rm.save(tmp_path / "rm", {"note": "test"})
    assert json.loads((tmp_path / "rm" / RM_INFO).read_text()) == {"format": "text", "note": "test"}
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "rm")
    texts = [p + r for p, r in zip(PROMPTS, RESPONSES)]
    with torch.no_grad():
        hf = model(**tokenizer(texts, return_tensors="pt", padding=True)).logits[:, 0]
        alone = torch.stack([model(**tokenizer(t, return_tensors="pt")).logits[0, 0] for t in texts])
    ours = rm.score(PROMPTS, RESPONSES)
    assert ours.abs().min() > 0.1  # scores that could differ
    torch.testing.assert_close(hf, ours, atol=1e-5, rtol=0)
    torch.testing.assert_close(alone, ours, atol=1e-5, rtol=0)  # padding does not move a score
    torch.testing.assert_close(RewardModel.load(tmp_path / "rm").score(PROMPTS, RESPONSES), ours, atol=1e-6, rtol=0)


def test_score_is_batched_without_grad_and_keeps_the_training_mode(rm):
    rm.train()
    whole = rm.score(PROMPTS, RESPONSES)
    split = rm.score(PROMPTS, RESPONSES, batch_size=1)
    assert not whole.requires_grad and rm.model.training
    torch.testing.assert_close(whole, split, atol=1e-5, rtol=0)
    assert rm.rewards(PROMPTS, RESPONSES).requires_grad
    assert rm.score([], []).shape == (0,)


def test_builtin_context_holds_the_longest_pair_and_a_too_long_text_is_refused(rm):
    long_prompt = "1" * 100 + "+1="
    fitted = RewardModel.builtin(SMALL, fit=([long_prompt], ["2"]))
    assert fitted.max_length == len(long_prompt) + 2  # bos + prompt + response
    assert fitted.score([long_prompt], ["2"]).shape == (1,)
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        rm.score([long_prompt], ["2"])


def test_load_refuses_a_causal_lm_folder_and_init_from_turns_one_into_a_reward_model(tmp_path):
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    causal = build_tiny_model(SMALL, tokenizer)
    causal.save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    with pytest.raises(ConfigError, match="not a reward model folder"):
        RewardModel.load(tmp_path / "lm")
    rm = RewardModel.init_from(tmp_path / "lm")
    assert rm.score(PROMPTS, RESPONSES).tolist() == [0.0, 0.0, 0.0]
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "lm")
    assert torch.equal(rm.model.model.embed_tokens.weight, loaded.model.embed_tokens.weight)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        RewardModel.init_from(tmp_path / "missing")


def test_a_chat_checkpoint_reads_pairs_through_its_template(chat_checkpoint, tmp_path):
    rm = RewardModel.init_from(chat_checkpoint(128), chat_template=True)
    assert rm.format == "chat"
    assert rm.texts(["Hi"], ["Hello"]) == ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"]
    rm.save(tmp_path / "rm")
    assert RewardModel.load(tmp_path / "rm").format == "chat"
    assert RewardModel.init_from(chat_checkpoint(128)).format == "text"  # the template is opt-in


def test_a_tokenizer_without_a_pad_token_pads_with_eos():
    tokenizer = build_char_tokenizer()
    tokenizer.pad_token = None
    rm = RewardModel.from_causal_lm(build_tiny_model(SMALL, build_char_tokenizer()), tokenizer)
    assert rm.tokenizer.pad_token_id == tokenizer.eos_token_id == rm.model.config.pad_token_id
    assert rm.score(PROMPTS, RESPONSES).shape == (3,)


def test_pair_outcomes_strict_half_ties_and_nan():
    chosen = torch.tensor([2.0, 1.0, 1.0, float("nan"), 0.0])
    rejected = torch.tensor([1.0, 1.0, 3.0, 0.0, float("nan")])
    assert pair_outcomes(chosen, rejected).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert pair_outcomes(chosen, rejected, ties=0.5).tolist() == [1.0, 0.5, 0.0, 0.0, 0.0]
