"""The floor for a GRPO step: a hand-written minimal loop, and polo's Trainer.step as a ratio of it.

The floor, with no framework: left-padded prompts, sampling with the model's KV cache (a finished row is
kept in the batch, as in ``generate``), decode + the same two rewards, the group z-score, one forward +
backward of the GRPO loss (PPO clip 0.2 on the sampler's log-probs, per-sequence token mean), grad clip
1, AdamW (same lr). Same model folder, prompts (polo's order), settings and thread count as
bench/train_step.py; the floor and polo (also without skipping zero-advantage rows, which the floor trains)
alternate step by step.

``--regime long``: the base model, 8-digit ``addition_trace`` prompts, ≤ 128 and ≤ 256 tokens, polo without
skipping only (common.Regime).

Each step's model FLOPs are counted as it runs (bench/limit.py); ``/ limit`` columns are the fraction of the
machine's matmul throughput at the step's own GEMM shapes, measured in the same run, that the step achieved
(polo: also its sampling and update stages).

    python bench/minimal_grpo.py [--quick] [--regime long]
"""
from __future__ import annotations

from contextlib import ExitStack

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from common import ADDITION, CACHE_ARG, LR, REGIME_OPTION, REGIMES, interleaved, median, paired_ratio, parse_args, \
    polo_trainer, print_table, prompt_order, reward_functions, save_model
from limit import FlopCounter, Work, achieved, describe, step_fractions


class MinimalGRPO:
    def __init__(self, model_dir, setting, seed: int = 0, task: dict = ADDITION):
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
        self.tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=0.0)
        self.setting, self.rewards, self.weights = setting, *reward_functions(task)
        self.examples = iter(prompt_order(setting.prompts * 1000, seed, task))
        self.generator = torch.Generator().manual_seed(seed + 1)

    @torch.no_grad()
    def sample(self, ids, mask):
        B, eos = ids.shape[0], self.tok.eos_token_id
        cache, pos = DynamicCache(config=self.model.config), (mask.cumsum(-1) - 1).clamp(min=0)
        inputs, out, logps = {"input_ids": ids, "position_ids": pos}, [], []
        done = torch.zeros(B, dtype=torch.bool)
        for _ in range(self.setting.max_tokens):
            logits = self.model(**inputs, attention_mask=mask, use_cache=True, logits_to_keep=1,
                                **{CACHE_ARG: cache}).logits[:, -1].log_softmax(-1)
            token = torch.multinomial(logits.exp(), 1, generator=self.generator).squeeze(-1)
            out.append(token.masked_fill(done, self.tok.pad_token_id))
            logps.append(logits.gather(-1, token[:, None]).squeeze(-1))
            valid = ~done
            done = done | (token == eos)
            if done.all():
                break
            mask = torch.cat([mask, valid.long()[:, None]], 1)
            inputs = {"input_ids": token[:, None], "position_ids": inputs["position_ids"][:, -1:] + 1}
        ids_out, old = torch.stack(out, 1), torch.stack(logps, 1)
        is_eos = (ids_out == eos).long()
        return ids_out, (is_eos.cumsum(-1) - is_eos == 0).float(), old

    def step(self) -> float:
        s = self.setting
        examples = [next(self.examples) for _ in range(s.prompts)]
        prompts = [e.prompt for e in examples for _ in range(s.generations)]
        answers = [e.answer for e in examples for _ in range(s.generations)]
        enc = self.tok(prompts, padding=True, padding_side="left", return_tensors="pt")
        self.model.eval()
        resp, mask, old_logp = self.sample(enc.input_ids, enc.attention_mask)
        texts = self.tok.batch_decode(resp, skip_special_tokens=True)
        reward = sum(w * torch.tensor(fn(prompts=prompts, completions=texts, answer=answers))
                     for fn, w in zip(self.rewards, self.weights)).view(s.prompts, s.generations)
        adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)).view(-1, 1)

        self.model.train()
        ids = torch.cat([enc.input_ids, resp], 1)
        attention = torch.cat([enc.attention_mask, torch.ones_like(resp)], 1)
        position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(input_ids=ids, attention_mask=attention, position_ids=position_ids,
                            logits_to_keep=resp.shape[1] + 1).logits[:, :-1]
        logp = logits.log_softmax(-1).gather(-1, resp[..., None]).squeeze(-1)
        ratio = (logp - old_logp).exp()
        token_loss = -torch.minimum(adv * ratio, adv * ratio.clamp(0.8, 1.2))
        loss = ((token_loss * mask).sum(1) / mask.sum(1)).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(mask.sum(1).mean())


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], regime=REGIME_OPTION)
    regime = REGIMES[args.regime]
    reps, warmup = (4, 2) if args.quick else (15, 2) if regime.skipping else (3, 1)
    rows = []
    for setting in regime.settings:
        model_dir = save_model(regime.size, setting.eos_prob)
        no_skip = polo_trainer(model_dir, setting, extra=("train.skip_zero_advantage_rows=false",), task=regime.task)
        floor = MinimalGRPO(model_dir, setting, task=regime.task)
        models = {"no-skip": no_skip.policy.hf_model, "floor": floor.model}
        cases = {"no-skip": no_skip.step, "floor": floor.step}
        if regime.skipping:
            polo = polo_trainer(model_dir, setting, task=regime.task)
            models, cases = {"polo": polo.policy.hf_model, **models}, {"polo": polo.step, **cases}
        with ExitStack() as stack:
            counters = {name: stack.enter_context(FlopCounter(model)) for name, model in models.items()}
            times, got = interleaved({name: counters[name].counted(fn) for name, fn in cases.items()}, reps,
                                     warmup=warmup)
        out = {name: [result for result, _ in runs] for name, runs in got.items()}
        works = {name: [work for _, work in runs] for name, runs in got.items()}
        polo_runs = [name for name in cases if name != "floor"]
        rows.append([setting.name, median([r["response/length"] for r in out["no-skip"]]), median(out["floor"]),
                     median([r["frac_zero_adv_groups"] for r in out["no-skip"]]),
                     *(median(times[name]) for name in cases),
                     *(paired_ratio(times[name], times["floor"]) for name in polo_runs),
                     *(f for name in polo_runs for f in step_fractions(times[name], out[name], works[name])),
                     achieved(Work.of(works["floor"]), sum(times["floor"]))[1]])
        for name in cases:
            print(f"  {setting.name}, {name}: {describe(Work.of(works[name]), sum(times[name]))}", flush=True)
        print(f"  {setting.name} done", flush=True)
    header = ["setting", "polo mean len", "floor mean len", "zero-adv groups", *(f"{k} s/step" for k in cases),
              *(f"{k} / floor" for k in polo_runs),
              *(f"{k} {part} / limit" for k in polo_runs for part in ("step", "sample", "update")),
              "floor step / limit"]
    print_table(f"GRPO step vs the hand-written floor, {args.regime} regime, {regime.size} model (median of {reps} "
                f"alternating steps)", header, rows)
    print("\ntarget: polo / floor <= 1.05")


if __name__ == "__main__":
    main()
