"""The built-in vision-language policy: prompts with pictures, forward, save/load, sampling."""
import numpy as np
import pytest
import torch

from polo.policy.tokenizer import build_char_tokenizer
from polo.policy.vision import VisionPolicy, decode_images
from polo.engines.sampler import sample
from polo.tasks.base import Example
from polo.tasks.images import encode_image
from polo.train.config import Model


def picture(seed: int) -> bytes:
    return encode_image(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8))


def examples(*seeds: int, question: str = "how many red?") -> list[Example]:
    return [Example(f"<image>{question}", "1", {"image": picture(s)}) for s in seeds]


@pytest.fixture(scope="module")
def policy() -> VisionPolicy:
    torch.manual_seed(0)
    return VisionPolicy.build_tiny(Model(kind="vision")).eval()


def test_build_adds_one_image_token_and_keeps_the_character_ids(policy):
    chars = build_char_tokenizer()
    assert policy.image_token_id == len(chars) and policy.image_tokens == 16 and policy.image_size == 32
    assert policy.tokenizer("a+b=")["input_ids"] == chars("a+b=")["input_ids"]
    ids, mask = policy.encode_prompts(examples(0) + ["<image>hi"])
    assert ids.shape == (2, 1 + 16 + len("how many red?"))
    assert (ids[1, -18:-2] == policy.image_token_id).all() and mask[1, :-19].sum() == 0  # left-padded
    assert type(policy.hf_model).__name__ == "LlavaForConditionalGeneration"


def test_pixel_values_are_the_picture_scaled_to_plus_minus_one(policy):
    raw = np.random.default_rng(3).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    pixels = policy.prompt_inputs(examples(3))["pixel_values"]
    assert pixels.shape == (1, 3, 32, 32)
    assert torch.allclose(pixels[0], torch.from_numpy(raw).permute(2, 0, 1).float() / 127.5 - 1, atol=1e-6)


def test_forward_logp_depends_on_the_picture(policy):
    ids, mask = policy.encode_prompts(examples(0, 1))
    ids, mask = ids[:1].repeat(2, 1), mask[:1].repeat(2, 1)  # one prompt text, two pictures
    response, response_mask = policy.encode_completions(["12", "12"])
    pixels = policy.prompt_inputs(examples(0, 1))["pixel_values"]
    logp = policy.forward_logp(ids, mask, response, response_mask, pixel_values=pixels)["logp"]
    assert (logp[0] - logp[1]).abs().max() > 1e-4
    same = policy.forward_logp(ids, mask, response, response_mask, pixel_values=pixels[:1].repeat(2, 1, 1, 1))
    assert torch.allclose(same["logp"][0], same["logp"][1], atol=1e-6)
    loss = policy.demonstration_loss(ids, mask, response, response_mask, {"pixel_values": pixels})
    assert torch.allclose(loss, -(logp * response_mask).sum() / response_mask.sum(), atol=1e-6)


def test_save_and_load_give_equal_logits(policy, tmp_path):
    ids, mask = policy.encode_prompts(examples(0, 1))
    response, response_mask = policy.encode_completions(["3", "45"])
    inputs = policy.prompt_inputs(examples(0, 1))
    policy.save(tmp_path)
    loaded = VisionPolicy.load(tmp_path).eval()
    assert loaded.image_token_id == policy.image_token_id and loaded.image_tokens == 16
    before = policy.forward_logp(ids, mask, response, response_mask, **inputs)["logp"]
    after = loaded.forward_logp(ids, mask, response, response_mask, **inputs)["logp"]
    assert torch.allclose(before, after, atol=1e-6)
    assert torch.equal(loaded.encode_prompts(examples(0))[0], policy.encode_prompts(examples(0))[0])


def test_sampling_is_deterministic_matches_forward_and_separates_pictures(policy):
    prompts = examples(0, 1, 0, 2)  # rows 0 and 2 share prompt and picture; row 1 shares the text only
    ids, mask = policy.encode_prompts(prompts)
    inputs = policy.prompt_inputs(prompts)
    draws = [sample(policy, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(7), inputs=inputs)
             for _ in range(2)]
    assert torch.equal(draws[0].response_ids, draws[1].response_ids) and torch.equal(draws[0].logp, draws[1].logp)
    out = draws[0]
    assert not (out.response_ids == policy.image_token_id).any()
    forward = policy.forward_logp(ids, mask, out.response_ids, out.response_mask, **inputs)["logp"]
    assert torch.allclose(forward, out.logp, atol=1e-4)
    greedy = sample(policy, ids, mask, max_new_tokens=6, greedy=True, inputs=inputs)
    alone = [sample(policy, ids[i:i + 1], mask[i:i + 1], max_new_tokens=6, greedy=True,
                    inputs={"pixel_values": inputs["pixel_values"][i:i + 1]}) for i in range(4)]
    assert torch.allclose(greedy.logp, torch.cat([a.logp for a in alone]), atol=1e-4)


def test_the_image_token_is_never_a_response_token(policy):
    ids, mask = policy.encode_prompts(examples(0))
    response = torch.tensor([[policy.image_token_id, policy.eos_token_id]])
    logits = policy.restrict(torch.zeros(1, 2, len(policy.tokenizer)), ids, mask, response)
    assert torch.isinf(logits[..., policy.image_token_id]).all() and torch.isfinite(logits[..., :100]).all()


def test_prompts_and_pictures_are_checked(policy):
    with pytest.raises(ValueError, match="holds 0 image tokens, expected 16"):
        policy.encode_prompts(["how many red?"])
    with pytest.raises(ValueError, match="holds 32 image tokens"):
        policy.encode_prompts(["<image><image>red?"])
    with pytest.raises(ValueError, match="no 'image' column"):
        policy.prompt_inputs([Example("<image>red?", "1")])
    with pytest.raises(ValueError, match="image_size=32 needs 3·32² = 3072"):
        decode_images([b"\x00" * 12], 32)
    with pytest.raises(ValueError, match="uint8 array"):
        encode_image(np.zeros((4, 4), dtype=np.uint8))
    ids, mask = policy.encode_prompts(examples(0))
    with pytest.raises(ValueError, match="pixel_values"):
        policy.forward_logp(ids, mask, *policy.encode_completions(["1"]))
    with pytest.raises(ValueError, match="inputs=policy.prompt_inputs"):
        sample(policy, ids, mask, max_new_tokens=2)

