"""Tool calls executed during generation: where the policy calls a task's tool, the tool's reply is fed to the model
as forced tokens and decoding goes on with the reply in context.

A task that declares a ``Tool`` (``Task.tool()``: a trigger text, e.g. a calculator call's closing tag ``</c>``,
and ``respond(completion so far) -> reply``) is decoded by polo's sampler with a ``ToolCalls`` state: after each
step, the rows whose generated text now ends with the trigger's tokens get ``respond`` of their text, tokenized,
and at the next steps those rows take the reply's tokens in place of sampled ones, through the same KV cache (no
re-prefill). One response row holds the whole completion, as in DESIGN.md's data model and the trajectory-row view
of polo.engines.trajectory_rows: the policy's tokens have ``response_mask`` 1 and their sampled log-probs; the
reply's tokens have ``response_mask`` 0 and log-prob 0 (``tool_mask`` 1), so they are context for every later
token (``concat_inputs`` attends every response position) but never actions: out of the loss and of every
log-prob, ratio and entropy of the update. ``max_new_tokens`` bounds the whole response, replies included.

The trigger is matched as the tokenizer's encoding of its text (one character per token for the built-in model);
a checkpoint that writes the same text through other tokens is not paused there.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.tasks.base import Tool


class ToolCalls:
    """The replies a decode owes its ``B`` rows (indexed as in the sampler's output), and where they were written."""

    def __init__(self, tool: Tool, policy, B: int, max_new_tokens: int, device: torch.device):
        self.tool, self.tokenizer = tool, policy.tokenizer
        self.trigger = torch.tensor(self.encode(tool.trigger), device=device)
        if not len(self.trigger):
            raise ValueError(f"tool trigger {tool.trigger!r} encodes to no token")
        self.queue: dict[int, list[int]] = {}  # row -> reply tokens not yet fed
        self.mask = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def force(self, rows: Tensor, token: Tensor, t: int) -> tuple[Tensor, Tensor | None]:
        """The step-``t`` tokens of the model's batch (``rows``: their output rows): the next reply token where one
        is owed, else the sampled one; and which rows were forced (None: none)."""
        if not self.queue:
            return token, None
        owed = torch.tensor(sorted(self.queue), device=rows.device)
        forced = torch.isin(rows, owed)
        at = rows[forced]
        token = token.clone()
        token[forced] = torch.tensor([self.queue[b].pop(0) for b in at.tolist()], device=token.device)
        self.queue = {b: reply for b, reply in self.queue.items() if reply}
        self.mask[at, t] = 1
        return token, forced

    def after_step(self, rows: Tensor, sampled: Tensor, out_ids: Tensor, steps: int) -> None:
        """Queue the reply of every row of ``rows`` whose ``sampled`` token completed the trigger."""
        k = len(self.trigger)
        if steps < k:
            return
        hit = sampled & (out_ids[rows, steps - k: steps] == self.trigger).all(-1)
        for b in rows[hit].tolist():
            text = self.tokenizer.decode(out_ids[b, :steps].tolist(), skip_special_tokens=True)
            reply = self.encode(self.tool.respond(text))
            if reply:
                self.queue[b] = reply
