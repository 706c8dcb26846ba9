"""Tools executed during sampling (polo.engines.tool_use): the calculator's replies replace what the policy would
have written, bad calls get an error reply, and the replies are context but never actions (mask 0, no log-prob,
no gradient)."""
import copy
import re

import pytest
import torch

from conftest import noisy_tiny_policy
from polo.core.aggregation import StepCounts, TokenMean
from polo.core.batch import RolloutBatch
from polo.core.losses import PPOClip
from polo.engines.sampler import sample
from polo.tasks import build_task
from polo.tasks.base import Tool
from polo.tasks.tool_calls import calculator

PROMPT = "Ann has 7 pears. Ann gets 3 boxes of 4. How many pears does Ann have?\n"
PLAN = ["<c>3*4</c>=99", "<c>7+99</c>=55", "<c>3/0</c>=1", "<a>55 pears</a>"]
"""What the scripted policy writes: each call with a wrong result of its own, then an answer."""


class ScriptedDecoder:
    """A decoder (the sampler's interface) that puts all mass on the next character of ``PLAN``: line i of the
    completion follows ``PLAN[i]`` while it is a prefix of it, and a line that departs from its plan (a tool
    wrote something else) or is complete is ended with a newline; eos after the last line."""

    keep_hidden, new_tokens, hidden = False, 0, None

    def __init__(self, policy):
        self.policy, self.rows = policy, []

    def prefill(self, distinct, **_):
        ids, mask, inverse = distinct
        self.rows = [row[m.bool()].tolist() for row, m in zip(ids[inverse], mask[inverse])]
        return self.logits()

    def step(self, inputs):
        for row, token in zip(self.rows, inputs["input_ids"][:, 0].tolist()):
            row.append(token)
        return self.logits()

    def select(self, keep):
        self.rows = [self.rows[i] for i in keep.tolist()]

    def next_text(self, completion: str) -> str | None:
        lines = completion.split("\n")
        if len(lines) > len(PLAN):
            return None
        plan, line = PLAN[len(lines) - 1], lines[-1]
        if plan.startswith(line) and len(line) < len(plan):
            return plan[len(line)]
        return "\n" if len(lines) < len(PLAN) else None

    def logits(self):
        tokenizer = self.policy.tokenizer
        out = torch.full((len(self.rows), len(tokenizer)), -30.0)
        for i, row in enumerate(self.rows):
            text = tokenizer.decode(row, skip_special_tokens=True).split(PROMPT, 1)[1]
            nxt = self.next_text(text)
            out[i, self.policy.eos_token_id if nxt is None else tokenizer.convert_tokens_to_ids(nxt)] = 30.0
        return out


@pytest.fixture(scope="module")
def policy():
    return noisy_tiny_policy()


@pytest.fixture
def scripted(policy):
    scripted = copy.copy(policy)
    scripted.decoder = lambda: ScriptedDecoder(scripted)
    return scripted


def calls_and_replies(text: str) -> list[tuple[str, str]]:
    return re.findall(r"<c>([^<]*)</c>(=[^\n]*)", text)


def test_executed_calls_get_the_calculators_values(scripted):
    tool = build_task({"name": "tool_calc"}).tool()
    ids, mask = scripted.encode_prompts([PROMPT] * 2)
    plain = sample(scripted, ids, mask, max_new_tokens=80, generator=torch.Generator().manual_seed(0))
    assert scripted.decode(plain.response_ids, plain.response_mask)[0] == "\n".join(PLAN)  # its own, wrong results
    out = sample(scripted, ids, mask, max_new_tokens=80, generator=torch.Generator().manual_seed(0), tool=tool)
    texts = scripted.decode(out.response_ids, out.text_mask)
    assert texts == ["<c>3*4</c>=12\n<c>7+99</c>=106\n<c>3/0</c>=error\n<a>55 pears</a>"] * 2
    assert all(reply == calculator(arg) for arg, reply in calls_and_replies(texts[0]))
    # the replies, and only they, are the tool's: mask 0, log-prob 0; the policy's text is the plan without results
    replies = scripted.decode(out.response_ids, out.tool_mask)
    assert replies == ["=12=106=error"] * 2
    own = "<c>3*4</c>\n<c>7+99</c>\n<c>3/0</c>\n<a>55 pears</a>"
    assert scripted.decode(out.response_ids, out.response_mask) == [own] * 2
    assert (out.logp[out.tool_mask.bool()] == 0).all() and not out.truncated.any()
    # max_new_tokens bounds the whole response, the tool's tokens included
    short = sample(scripted, ids, mask, max_new_tokens=12, generator=torch.Generator().manual_seed(0), tool=tool)
    assert short.response_ids.shape[1] == 12 and short.truncated.all()
    assert scripted.decode(short.response_ids, short.text_mask)[0] == "<c>3*4</c>=1"


def test_bad_calls_get_an_error_reply():
    tool = build_task({"name": "tool_calc"}).tool()
    assert tool.trigger == "</c>"
    assert tool.respond("<c>3*4</c>") == "=12" and tool.respond("x\n<c>(2+4)/3</c>") == "=2"
    for bad in ("<c>3/0</c>", "<c>7/2</c>", "<c>2**8</c>", "<c>__import__('os')</c>", "<c></c>", "no call</c>",
                "<c>1+<a>2</c>"):
        assert tool.respond(bad) == "=error"
    assert build_task({"name": "tool_calc", "execute_calls": False}).tool() is None


def test_tool_tokens_are_context_but_never_actions(policy, f32):
    """A tool triggered by a character the random policy writes often: the sampled log-probs of the policy's
    tokens are those of one forward over prompt ++ response (the replies in context), the replies have none, and
    the PPO loss's gradient is zero at the replies' positions."""
    policy = copy.deepcopy(policy).double()  # KV-cached decode vs a full forward, as in test_sampler
    ids, mask = policy.encode_prompts(["hello", "what is 2+3?", "xyz", "7*6="])
    draws = sample(policy, ids, mask, max_new_tokens=24, generator=torch.Generator().manual_seed(1))
    common = int(draws.response_ids[draws.response_mask.bool()].mode().values)
    tool = Tool(policy.tokenizer.decode([common]), lambda text: "=7")
    out = sample(policy, ids, mask, max_new_tokens=24, generator=torch.Generator().manual_seed(1), tool=tool)
    replies, own = out.tool_mask.bool(), out.response_mask.bool()
    assert replies.sum() >= 4 and not (replies & own).any()
    fw = policy.forward_logp(ids, mask, out.response_ids, out.response_mask, return_full=True)
    atol = f32.logp_atol(policy, ids, mask, out.response_ids, out.response_mask)
    torch.testing.assert_close(fw["logp"], out.logp, atol=atol, rtol=0)
    assert (fw["logp"][replies] == 0).all()
    # the loss on the log-probs of every text token: no gradient reaches the replies'
    logp = fw["logprobs_full"].detach().gather(-1, out.response_ids[..., None]).squeeze(-1).requires_grad_()
    B, T = out.response_ids.shape
    batch = RolloutBatch(prompt_ids=ids, prompt_mask=mask, response_ids=out.response_ids,
                         response_mask=out.response_mask, group=torch.zeros(B, dtype=torch.long),
                         rewards=torch.zeros(B), old_logp=out.logp, advantages=torch.ones(B, T, dtype=logp.dtype))
    loss = TokenMean()(PPOClip()(logp, batch).token_loss, batch.mask, StepCounts.from_mask(batch.mask, T))
    grad, = torch.autograd.grad(loss, logp)
    assert (grad[replies] == 0).all() and (grad[own] != 0).all()
