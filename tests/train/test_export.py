"""``polo export`` and ``RUN/final/``: Hugging Face folders that transformers (and peft) load without polo, giving
the logits of polo's own policy loaded from the same checkpoint."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from polo.cli import main
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.tasks import build_task
from polo.train.checkpoint import load_weights
from polo.train.config import load_recipe
from polo.train.export import EXPORT_INFO, save_export
from polo.train.trainer import load_policy

LORA = ["model.lora.r=4", "model.lora.target_modules=[q_proj,v_proj]"]


def _train(tmp_path_factory, name, extra):
    from conftest import TINY  # the tiny fixture is function-scoped; these runs are shared by the module

    run = tmp_path_factory.mktemp(name) / "run"
    argv = ["train", "grpo", *TINY, "train.steps=2", "train.save_every=1", *extra, "--run-dir", str(run)]
    assert main(argv) == 0
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _train(tmp_path_factory, "export", [])


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    return _train(tmp_path_factory, "export_lora", LORA)


def polo_policy(run, step):
    """polo's own policy of ``run`` with the weights of checkpoint ``step``, and a few test prompts."""
    recipe = load_recipe(run / "config.yaml")
    task = build_task(recipe.task)
    prompts = [e.prompt for e in task.examples("test", 4, seed=0)]
    policy = load_policy(recipe, task, prompts, log=lambda _: None)
    policy.load_state_dict(load_weights(run / "checkpoints" / f"step_{step:06d}")["policy"])
    return policy.eval(), prompts


@torch.no_grad()
def logit_pairs(model, folder, run, step):
    """``(model's logits, polo's logits)`` per prompt, each tokenized by the folder's and by polo's tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    policy, prompts = polo_policy(run, step)
    pairs = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        assert ids.tolist() == policy.tokenizer(prompt, return_tensors="pt")["input_ids"].tolist()
        pairs.append((model.eval()(ids).logits, policy.model(ids).logits))
    return pairs


def assert_identical(folder, run, step):
    model = AutoModelForCausalLM.from_pretrained(folder)
    for exported, own in logit_pairs(model, folder, run, step):
        assert torch.equal(exported, own)  # bit-equal weights, same kernels: identical logits


def assert_merged_close(folder, run, f32):
    """A merged layer computes ``x·(W + ΔW)`` with ``W + ΔW`` rounded once to float32, the adapter path
    ``x·W + x·ΔW``: float32 sums of ``hidden_size`` products taken another way, a few ulps of the logits'
    magnitude times √hidden_size (``Float32.atol``)."""
    model = AutoModelForCausalLM.from_pretrained(folder)
    terms = model.config.hidden_size
    for exported, own in logit_pairs(model, folder, run, 2):
        torch.testing.assert_close(exported, own, rtol=0, atol=f32.atol(own.abs().max(), terms))


def info(folder):
    return json.loads((folder / EXPORT_INFO).read_text())


def test_export_loads_with_transformers_and_matches_the_checkpoint(run, tmp_path):
    out = tmp_path / "out"
    assert main(["export", str(run), str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    assert info(out)["step"] == 2 and info(out)["checkpoint"] == "step_000002"
    assert_identical(out, run, 2)
    assert main(["export", str(run), str(out), "--step", "1"]) == 0  # a previous export is replaced
    assert info(out)["step"] == 1


def test_step_selects_an_older_checkpoint(run, tmp_path):
    assert main(["export", str(run), str(tmp_path / "out"), "--step", "1"]) == 0
    assert_identical(tmp_path / "out", run, 1)
    old, new = (load_weights(run / "checkpoints" / f"step_{s:06d}")["policy"] for s in (1, 2))
    assert any(not torch.equal(old[k], new[k]) for k in old)  # step 1 is another model than step 2


def test_train_ends_by_writing_a_loadable_final_folder(run):
    assert info(run / "final") == {"run": str(run.resolve()), "step": 2, "merged_lora": False}
    assert_identical(run / "final", run, 2)


def test_lora_export_merged_and_final_match_the_adapter_policy(lora_run, tmp_path, f32):
    out = tmp_path / "merged"
    assert main(["export", str(lora_run), str(out), "--merge-lora"]) == 0
    assert not (out / "adapter").exists() and info(out)["merged_lora"] is True
    base = load_weights(lora_run / "checkpoints" / "step_000002")["policy"]
    merged = AutoModelForCausalLM.from_pretrained(out).state_dict()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[q], base[f"model.base_model.model.{q.replace('.weight', '.base_layer.weight')}"])
    assert_merged_close(out, lora_run, f32)
    assert info(lora_run / "final")["merged_lora"] is True
    assert_merged_close(lora_run / "final", lora_run, f32)


def test_lora_export_unmerged_is_base_weights_plus_a_peft_adapter(lora_run, tmp_path):
    from peft import PeftModel

    out = tmp_path / "adapter_export"
    assert main(["export", str(lora_run), str(out)]) == 0
    assert info(out)["merged_lora"] is False
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(out), str(out / "adapter"))
    for exported, own in logit_pairs(model, out, lora_run, 2):
        assert torch.equal(exported, own)


def test_chat_template_is_exported(tmp_path):
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=16))
    policy.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    save_export(policy, tmp_path / "out", {}, merge_lora=False)
    assert AutoTokenizer.from_pretrained(tmp_path / "out").chat_template == policy.tokenizer.chat_template


@pytest.mark.parametrize("case", ["bad_step", "not_a_run", "occupied_out"])
def test_cli_errors_are_one_line(case, run, tmp_path, capsys):
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "notes.txt").write_text("mine")
    argv, expected = {
        "bad_step": ([str(run), str(tmp_path / "out"), "--step", "7"], "available steps: 1, 2"),
        "not_a_run": ([str(tmp_path), str(tmp_path / "out")], "is not a run folder (no config.yaml)"),
        "occupied_out": ([str(run), str(tmp_path / "occupied")], "refusing to overwrite"),
    }[case]
    code = main(["export", *argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not (tmp_path / "out").exists() and (tmp_path / "occupied" / "notes.txt").read_text() == "mine"


def test_eval_needs_no_warm_start_cache(run, tmp_path, monkeypatch, capsys):
    """``polo eval`` rebuilds the model from config.yaml and the checkpoint: on a machine without the run's
    warm-start cache it evaluates without training one."""
    empty = tmp_path / "empty_cache"
    monkeypatch.setenv("POLO_CACHE", str(empty))
    assert main(["eval", str(run), "--size", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 4
    assert not (empty / "warm_start").exists()
