"""The action a sampled reply gives its environment, and the reply's trained tokens: those of that action.

A reply's text is cut into the action the environment receives:
- written actions (the built-in model, or a chat checkpoint with an environment without tools): the text before the
  environment's ``action_stop`` (``;``), stripped of surrounding whitespace;
- tool calls (a chat checkpoint with an environment that declares tools, polo.engines.tool_calls): the call the
  tokenizer's response template reads, or else the first ``<tool_call>`` of the reply, turned into action text by
  ``env.tool_action``; a reply without a well-formed call
  of a known tool gives the empty action (invalid for the environment) and is read whole.

The trained tokens of the row are then the tokens of that text: a sampled token keeps ``response_mask`` 1 only when it
carries at least one character of the span the action was read from (for written actions the action itself; for a
tool call the reply up to the end of ``</tool_call>``, the content before the call included, as the next context
shows it), and the end-of-sequence token only when the action ran to it (no stop string, nothing after the call).
Tokens after the stop string or the call get mask 0 (and log-prob and entropy 0, as every untrained response token
has): the environment never saw them, so they carry no credit. Whitespace tokens around a written action get mask 0
too. An empty written action is trained up to the token that ended it (the stop string, or the end token), so that
the choice to end at once is still learnt.

Token boundaries: with a tokenizer of one character per token (the built-in model) the trained tokens decode to
exactly the action. With a BPE tokenizer a token may carry both the action's last character and the start of the
stop string (a merge such as ``"?;"``): it carries a character the environment saw, so it is trained, and the
trained text then ends with that piece of the stop string; likewise a token that joins leading whitespace to the
action's first character. Pre-tokenizers of the GPT-2 / Qwen kind split letters and digits from punctuation, so an
action that ends in a letter or digit is cut exactly. A row whose action ended at the stop string (or at a complete
call) is no longer ``truncated``, even when the sampler ran on to ``max_new_tokens`` after it.
"""
from __future__ import annotations

from collections.abc import Sequence
from os.path import commonprefix

import torch
from torch import Tensor

from polo.envs import Environment
from polo.envs.tools import ToolAction
from polo.engines.tool_calls import Reply, read_reply


def _written(full: str, stop: str) -> tuple[str, int, int, bool]:
    """``(action, start, end, keep_end)`` of a written action in reply text ``full``."""
    raw, found, _ = full.partition(stop)
    action = raw.strip()
    if action:
        start = len(raw) - len(raw.lstrip())
        return action, start, start + len(action), not found
    return "", 0, len(raw) + len(stop) if found else len(full), not found


def _called(env: Environment, full: str, reply: Reply) -> tuple[ToolAction, int, int, bool]:
    """``(action, start, end, keep_end)`` of the tool call ``reply`` read from reply text ``full``."""
    action = env.tool_action(*reply.call) if reply.call is not None else None
    if action is None:
        return ToolAction("", {"role": "assistant", "content": full.strip()}), 0, len(full), True
    return ToolAction(action, reply.message), 0, reply.end, not full[reply.end:].strip()


def take_actions(policy, envs: Sequence[Environment], contexts: Sequence, prompts: Tensor, prompt_mask: Tensor,
                 prefixes: Sequence[list[int]], out, texts: Sequence[str]) -> list[str]:
    """The action of each row (``texts``: the sampled replies to ``prompts``, ``prefixes``: forced leading token ids)
    for its environment, reading a tool call where the context offers tools; the tokens outside each action get
    ``response_mask`` 0 in ``out`` (log-prob and entropy 0 there too), and rows whose action ended before the end of
    the reply lose their ``truncated``."""
    tokenizer, stop_ids = policy.tokenizer, set(policy.stop_token_ids)
    ids, mask = out.response_ids.tolist(), out.response_mask.tolist()
    rows, actions, cuts = [], [], {}
    for b, (env, context, prefix, text) in enumerate(zip(envs, contexts, prefixes, texts)):
        call = bool(getattr(context, "tools", None))
        last = max([j for j, m in enumerate(mask[b]) if m] or [-1]) + 1
        visible = list(range(max(last, len(prefix))))
        rows.append(visible)
        if call:
            seq = [ids[b][j] for j in visible if ids[b][j] not in stop_ids]
            full = tokenizer.decode(seq, skip_special_tokens=False)
            prompt = prompts[b][prompt_mask[b].bool()].tolist()
            action, start, end, keep_end = _called(env, full, read_reply(tokenizer, full, prompt, context.tools))
        else:
            full = (tokenizer.decode(prefix, skip_special_tokens=True) if prefix else "") + text
            action, start, end, keep_end = _written(full, env.action_stop)
        actions.append(action)
        if (start, end, keep_end) != (0, len(full), True):
            cuts[b] = (full, start, end, keep_end, not call)
    if cuts:
        _cut(out, ids, rows, cuts, tokenizer, stop_ids)
    return actions


def _cut(out, ids: list[list[int]], rows: list[list[int]], cuts: dict, tokenizer, stop_ids: set[int]) -> None:
    """Mask each cut row's tokens outside its action span (see the module docstring): a token is kept when the
    characters it adds to the decoded reply meet ``[start, end)`` (a token that adds none, when it sits inside)."""
    keep = torch.ones_like(out.response_mask)
    for b, (full, start, end, keep_end, skip_special) in cuts.items():
        tokens = [j for j in rows[b] if ids[b][j] not in stop_ids]
        seq = [ids[b][j] for j in tokens]
        decoded = tokenizer.batch_decode([seq[: i + 1] for i in range(len(seq))], skip_special_tokens=skip_special)
        ends = dict(zip(tokens, (len(commonprefix([d, full])) for d in decoded)))
        before = 0
        for j in rows[b]:
            if ids[b][j] in stop_ids:  # the end token: the sampler stops at the first, so there is one at most
                keep[b, j] = int(keep_end)
                continue
            after = max(ends[j], before)
            keep[b, j] = int((before < end and after > start) or (before == after and start <= before < end))
            before = after
        if not keep_end:
            out.truncated[b] = False
    out.response_mask = out.response_mask * keep
    out.logp = out.logp * keep.to(out.logp)
    if out.entropy is not None:
        out.entropy = out.entropy * keep.to(out.entropy)
