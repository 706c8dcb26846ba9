"""The ``multi_turn`` engine: G episodes per task instance of a text environment, in lock-step batches.

Every example of the ``environment`` task is one episode seed. Its G episodes start from the same state; at
each turn the contexts of all live episodes (``task.context``: the rendered history window, or chat messages
with user, assistant and tool roles for a chat-template checkpoint) are encoded and decoded in one batched
sampler call (episodes whose contexts are equal share one prefill: the KV cache of a shared prefix is
computed once), each action is cut at the environment's stop string (or read as a tool call, for a chat template
and an environment with tools) and only its tokens stay trainable (polo.engines.actions), and the environments
step. An episode
ends when its environment terminates or truncates (``turn_limit``).

The batch is the step-row view: one row per (episode, turn), prompt = that turn's context, response = the
action the policy generated (observations, hints and rendering live in the prompts, so only generated tokens
are ever trainable). Every row carries its episode's return as its reward and the step-row inputs of
``polo.core.advantages.step_inputs`` in ``extras``: ``traj``, ``step``, ``anchor`` / ``next_anchor``
(equal ids ⇔ the same environment state text, per task instance; ``similarity_thresh`` clusters
near-equal texts), ``step_reward``, ``action_key``, ``valid``, ``tool_error``, ``correct``, ``context_hidden`` ``[N, d]`` (the
hidden-state handle: the last layer's state at the last context token, kept from the sampler's prefill; after
a forced prefix, at its last token) and every oracle
the environment reports (``judge``, ``ev``, ``uses_support``/``uses_failed``, ``hint``, ``memory_write``,
``memory_relevance``). ``Rollouts.turns`` holds the host-side ``TurnRecord`` of every row.

Rollout trees (``polo.engines.branches``): ``tree: {name: NAME, ...}`` names a registered brancher that grows
each step's tree from the played root episodes (built in: polo/methods/NAME/brancher.py). A branch starts from
its parent's state at the branch point (the snapshot kept while the roots played, at the turns the brancher's
``branch_point`` names; a replay only for a deterministic environment without snapshots) and owns only the turns
it samples; ``batch.parent`` is the parent trajectory (−1 for roots) and ``depth`` its depth; the brancher's own
per-row inputs (its ``writes``) are written on every row.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, PrivateAttr, field_serializer, model_validator
from torch import Tensor

from polo.core.agent_primitives import anchor_ids
from polo.core.batch import RolloutBatch
from polo.core.registry import ConfigError
from polo.policy.inputs import pad_sequences
from polo.engines.actions import take_actions
from polo.engines.branches import BRANCHERS, Brancher, TreeInputs, tree_from_engine_keys
from polo.engines.base import ENGINES, Engine, EngineSetup, Rollouts
from polo.engines.episodes import Episode, Tree, TurnRecord, check_restorable
from polo.engines.tool_calls import check_renders_tools
from polo.tasks.agent_context import ContextFit
from polo.tasks.base import Example

ORACLES = {"judge": "judge_score", "ev": "ev", "hint": "hint", "memory_write": "memory_write",
           "memory_relevance": "memory_relevance"}
"""Step-row input ← the environment's ``info`` key; written when the environment reports it on every turn,
except ``DEFAULT_ZERO`` ones, always written: 0 on turns without a memory write or a hint."""
DEFAULT_ZERO = frozenset({"memory_write", "memory_relevance", "hint"})


def _stack(parts: list[Tensor], width: int, value: float, left: bool) -> Tensor:
    """Pad each ``[b, w]`` part to ``width`` columns (on the left or the right) and concatenate the rows (padded
    positions are masked, so the pad value only has to be a valid token id)."""
    return torch.cat([F.pad(p, (width - p.shape[1], 0) if left else (0, width - p.shape[1]), value=value)
                      for p in parts])


def _bitmask(edges, kind: str) -> int:
    """The turns of ``depends_on`` edges of ``kind`` as bits of an int64."""
    bits = 0
    for turn, edge_kind in edges:
        if edge_kind == kind:
            if turn >= 63:
                raise ValueError(f"depends_on turn {turn}: the uses_* bitmasks hold turns 0..62")
            bits |= 1 << turn
    return bits


@ENGINES.register("multi_turn")
class MultiTurn(Engine):
    """Episodes of the ``environment`` task's text environment, one batched decode per turn; step rows out."""

    provides = TreeInputs({"old_logp", "correct", "prompt_index", "traj", "step", "anchor", "next_anchor",
                           "step_reward", "action_key", "valid", "tool_error", *ORACLES, "uses_support", "uses_failed",
                           "context_hidden"})
    similarity_thresh: float | None = Field(None, gt=0, le=1)
    """None: anchor states match by equal text (GiGPO's default); else difflib similarity ≥ this clusters them."""
    anchor: Literal["observation", "context"] = "observation"
    """The anchor state's text: the environment's current observation (the spec's), or the whole context the
    policy read (for environments whose observation does not identify the state, like GuessNum's "u: yes")."""
    tree: Brancher | None = None
    """The rollout tree grown from each step's root episodes: a registered brancher, ``{name: NAME, ...settings}``
    (polo.engines.branches); None: root episodes only."""

    _fit: ContextFit | None = PrivateAttr(None)
    """How the policy being played measures a context (set by ``play``), for the task's token budget."""

    @model_validator(mode="before")
    @classmethod
    def _build_tree(cls, data):
        data = tree_from_engine_keys(data)
        if isinstance(data, dict) and isinstance(data.get("tree"), (dict, str)):
            data = {**data, "tree": BRANCHERS.build(data["tree"], "engine.tree")}
        return data

    @field_serializer("tree")
    def _dump_tree(self, tree: Brancher | None):
        return None if tree is None else {"name": tree.registry_name, **tree.model_dump(mode="json")}

    def roles(self) -> set[str]:
        """The roles the tree's brancher reads."""
        return self.tree.roles() if self.tree is not None else set()

    def setup(self, setup: EngineSetup) -> None:
        if not hasattr(setup.task, "make_env"):
            raise ConfigError(f"engine multi_turn plays environment episodes; task {setup.task.name!r} has none: "
                              f"use task: {{name: environment, env: {{name: TextGrid-v0}}}}")
        if setup.reward_specs:
            raise ConfigError(f"engine multi_turn: the environment's rewards are the episode's return; remove the "
                              f"recipe's rewards ({', '.join(s.name for s in setup.reward_specs)})")
        if self.tree is not None:
            check_restorable(setup.task.make_env(), f"engine.tree {self.tree.registry_name}")
        super().setup(setup)

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        G = samples_per_prompt or self.settings.samples_per_prompt
        groups = [i for i in range(len(examples)) for _ in range(G)]
        episodes = self.start([examples[i].columns["seed"] for i in groups])
        calls = self.play(policy, episodes, generator, greedy,
                          entropy=self.tree is not None and self.tree.reads_entropy,
                          keep=self.tree.branch_point if self.tree is not None else None)
        tree = Tree(episodes, calls, {ep.traj: g for ep, g in zip(episodes, groups)})
        if self.tree is not None:
            self.tree.grow(self, policy, tree, generator)
        return self.step_rows(tree.calls, tree.episodes, tree.group_of, examples, prompt_index, tree.extras)

    def evaluate(self, policy, examples: list[Example]) -> float:
        """The fraction of ``examples`` (episode seeds) solved by one greedy episode each."""
        episodes = self.start([e.columns["seed"] for e in examples])
        self.play(policy, episodes, None, greedy=True)
        return sum(ep.success for ep in episodes) / max(1, len(episodes))

    def start(self, seeds: list[int]) -> list[Episode]:
        task = self.settings.task
        return [Episode.start(task.make_env(), seed, i) for i, seed in enumerate(seeds)]

    def play(self, policy, episodes: list[Episode], generator, greedy: bool, *, max_turns: int | None = None,
             action_prefix: dict[int, str | list[int]] | None = None, entropy: bool = False,
             keep: Callable[[Episode, str], bool] | None = None) -> list[dict]:
        """Play ``episodes`` in lock-step until they end (or for ``max_turns`` turns). ``action_prefix`` forces
        the start of an episode's first action, as text or token ids (a token-offset branch: the prefix is not
        sampled and not trainable). Before an episode takes an action, its state is kept as a branch point
        (``Episode.keep_state``) when ``keep(episode, action)``.
        Returns one dict per decoding call: its ``prompt_ids``/``prompt_mask``, the sampler output ``out`` (with the forced prefix as masked leading response tokens) and the new
        ``records``; each episode also gets its records."""
        s = self.settings
        chat = bool(getattr(policy, "chat_template", False))
        context_limit = getattr(policy.hf_model.config, "max_position_embeddings", None)
        forced = dict(action_prefix or {})
        self._fit = ContextFit(lambda context: int(policy.encode_prompts([context])[0].shape[1]), context_limit,
                               s.max_new_tokens)
        calls, turn = [], 0
        live = [ep for ep in episodes if not ep.done]
        while live and (max_turns is None or turn < max_turns):
            contexts = [self.context(ep, chat) for ep in live]
            schemas = next((c.tools for c in contexts if isinstance(c, Example) and c.tools), None)
            if schemas is not None and turn == 0:
                check_renders_tools(policy.tokenizer, schemas)
            ids, mask = policy.encode_prompts(contexts)
            prefixes = [self._prefix_ids(policy, forced.pop(ep.traj, [])) for ep in live]
            if context_limit is not None and ids.shape[1] + s.max_new_tokens > context_limit:
                longest = int(mask.sum(1).argmax())
                raise ConfigError(f"engine multi_turn: turn {len(live[longest].history)} of seed {live[longest].seed} "
                                  f"has a context of {ids.shape[1]} tokens; with {s.max_new_tokens} action tokens it "
                                  f"exceeds the model's {context_limit} positions: set task.context_tokens (model: "
                                  f"the oldest turns are dropped to fit), lower task.history_window or raise "
                                  f"model.tiny.max_position_embeddings")
            out = self._sample(policy, ids, mask, prefixes, generator, greedy, entropy)
            texts = policy.decode(out.response_ids, out.response_mask)
            contexts, ids, mask, out, texts = self.review(policy, live, contexts, ids, mask, prefixes, out, texts,
                                                          generator, greedy, entropy)
            actions = take_actions(policy, [ep.env for ep in live], contexts, ids, mask, prefixes, out, texts)
            records = []
            for ep, context, ids_, action in zip(live, contexts, prefixes, actions):
                prefix = policy.tokenizer.decode(ids_, skip_special_tokens=True) if ids_ else ""
                if keep is not None and keep(ep, action):
                    ep.keep_state()
                result = ep.apply(action)
                record = TurnRecord(ep.traj, len(ep.history) - 1, context, action, result.observation, result.reward,
                                    result.info, ep.seed, ep.env.prompt, ep.gold(), ep.env.probe_prefix,
                                    result.terminated, result.truncated, ep.parent, ep.depth, prefix)
                ep.records.append(record)
                records.append(record)
            calls.append({"prompt_ids": ids, "prompt_mask": mask, "out": out, "records": records})
            live = [ep for ep in live if not ep.done]
            turn += 1
        return calls

    def context(self, episode: Episode, chat: bool) -> str | Example:
        """What the policy reads before ``episode``'s next action: the task's rendering (an outer loop that
        changes what surrounds the policy, an instruction or a harness, overrides it)."""
        return self.settings.task.context(episode.env, episode.history, chat=chat, fit=self._fit)

    def review(self, policy, live: list[Episode], contexts: list, ids: Tensor, mask: Tensor, prefixes: list[list[int]],
               out, texts: list[str], generator, greedy: bool, entropy: bool):
        """Between sampling a turn's actions and playing them: a guard may replace some rows' contexts, prompts,
        samples and texts (HarmonyGuard's regenerated steps, polo.methods.harmony_guard.engine); here they pass."""
        return contexts, ids, mask, out, texts

    @staticmethod
    def _prefix_ids(policy, prefix: str | list[int]) -> list[int]:
        return policy.tokenizer(prefix, add_special_tokens=False)["input_ids"] if isinstance(prefix, str) else prefix

    def _sample(self, policy, ids: Tensor, mask: Tensor, pre: list[list[int]], generator, greedy: bool,
                entropy: bool):
        """Sample the actions of one turn; rows with a forced prefix continue after it, and the prefix comes
        back as leading response tokens with mask 0 (log-prob 0): owned by the parent, never trained."""
        s = self.settings
        kwargs = dict(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                      greedy=greedy, generator=generator, return_entropy=entropy, return_hidden=True)
        if not any(pre):
            return self.generate(policy, ids, mask, **kwargs)
        seqs = [row[m.bool()].tolist() + p for row, m, p in zip(ids, mask, pre)]
        out = self.generate(policy, *pad_sequences(seqs, policy.pad_token_id, left=True, device=ids.device), **kwargs)
        width = max(map(len, pre))
        joined = {name: [] for name in ("response_ids", "response_mask", "logp", "entropy")}
        device = out.response_ids.device
        for b, p in enumerate(pre):  # each row: its prefix (mask 0), its sampled tokens, then right padding
            n = len(p)
            zeros = torch.zeros(n, device=device)
            parts = {"response_ids": torch.cat([torch.tensor(p, dtype=torch.long, device=device), out.response_ids[b]]),
                     "response_mask": torch.cat([zeros.long(), out.response_mask[b]]),
                     "logp": torch.cat([zeros, out.logp[b]])}
            if out.entropy is not None:
                parts["entropy"] = torch.cat([zeros, out.entropy[b]])
            for name, value in parts.items():
                joined[name].append(F.pad(value, (0, width - n), value=0))
        out.response_ids, out.response_mask, out.logp = (torch.stack(joined[n]) for n in
                                                         ("response_ids", "response_mask", "logp"))
        out.entropy = torch.stack(joined["entropy"]) if out.entropy is not None else None
        return out

    def step_rows(self, calls: list[dict], episodes: list[Episode], group_of: dict[int, int],
                  examples: list[Example], prompt_index: list[int], extras: dict[int, dict[str, float]]) -> Rollouts:
        """The step-row ``Rollouts`` of played turns (rows in decoding order). ``group_of`` maps every trajectory
        (branches included) to its task; ``extras`` adds per-trajectory, per-step inputs keyed by traj
        (``{traj: {"<name>@<step>": value}}`` or ``{traj: {name: value}}`` for every row of traj)."""
        records = [r for c in calls for r in c["records"]]
        outs = [c["out"] for c in calls]
        group = [group_of[r.traj] for r in records]
        final = {ep.traj: ep for ep in episodes}
        Tp = max(c["prompt_ids"].shape[1] for c in calls)
        T = max(o.response_ids.shape[1] for o in outs)
        response_mask = _stack([o.response_mask for o in outs], T, 0, left=False)
        steps = torch.tensor([r.step for r in records])
        batch = RolloutBatch(
            prompt_ids=_stack([c["prompt_ids"] for c in calls], Tp, 0, left=True),
            prompt_mask=_stack([c["prompt_mask"] for c in calls], Tp, 0, left=True),
            response_ids=_stack([o.response_ids for o in outs], T, 0, left=False),
            response_mask=response_mask,
            group=torch.tensor(group),
            rewards=torch.tensor([[self._return(r, final)] for r in records], dtype=torch.float32),
            reward_names=("return",),
            truncated=torch.cat([o.truncated for o in outs]),
            old_logp=_stack([o.logp for o in outs], T, 0.0, left=False),
            turn=torch.where(response_mask.bool(), steps[:, None], -1),
            parent=torch.tensor([r.parent for r in records], dtype=torch.long),
            extras={
                "correct": torch.tensor([float(final[r.traj].success) if r.traj in final else 0.0 for r in records]),
                "prompt_index": torch.tensor([prompt_index[g] for g in group], dtype=torch.long),
                "traj": torch.tensor([r.traj for r in records], dtype=torch.long),
                "step": steps,
                "depth": torch.tensor([r.depth for r in records], dtype=torch.long),
                "context_hidden": torch.cat([o.hidden for o in outs]),
                **self._anchors(records, group),
                **self._env_inputs(records),
                **self._added(records, extras),
            },
        )
        return Rollouts(batch, [r.action for r in records], [examples[g] for g in group], turns=records)

    @staticmethod
    def _return(record: TurnRecord, final: dict[int, Episode]) -> float:
        """The episode return written on the row (a sibling row, a partial trajectory, gets its step reward)."""
        ep = final.get(record.traj)
        return ep.episode_return if ep is not None else record.reward

    def _anchors(self, records: list[TurnRecord], group: list[int]) -> dict[str, Tensor]:
        """``anchor`` (the state a turn was taken in) and ``next_anchor`` (the state it led to; −1 = the terminal
        sink: the episode terminated there, or was truncated in a state no turn of its group acted in)."""
        if self.anchor == "context":
            texts = [r.context_text for r in records]
            row_of = {(r.traj, r.step): i for i, r in enumerate(records)}
            # the next state is the next turn's context; past a trajectory's last row, an unseen state
            following = [texts[row_of[r.traj, r.step + 1]] if (r.traj, r.step + 1) in row_of else "\0end"
                         for r in records]
        else:
            texts = [r.info["anchor_obs"] for r in records]
            following = [r.observation for r in records]
        ids = anchor_ids(texts + following, group + group, self.similarity_thresh)
        anchor, after = ids[: len(records)], ids[len(records):]
        sources = set(zip(group, anchor))
        next_anchor = [-1 if r.terminated or (r.truncated and (g, a) not in sources) else a
                       for r, g, a in zip(records, group, after)]
        return {"anchor": torch.tensor(anchor, dtype=torch.long),
                "next_anchor": torch.tensor(next_anchor, dtype=torch.long)}

    @staticmethod
    def _env_inputs(records: list[TurnRecord]) -> dict[str, Tensor]:
        """``step_reward``, ``action_key``, ``valid``, ``tool_error``, the ``depends_on`` bitmasks and every
        oracle of ``ORACLES`` the environment reports."""
        infos = [r.info for r in records]
        keys: dict[str, int] = {}
        out = {
            "step_reward": torch.tensor([r.reward for r in records], dtype=torch.float32),
            "action_key": torch.tensor([keys.setdefault(r.action, len(keys)) for r in records], dtype=torch.long),
            "valid": torch.tensor([float(i["valid"]) for i in infos]),
            "tool_error": torch.tensor([float(i["tool_error"]) for i in infos]),
        }
        if infos and all("depends_on" in i for i in infos):
            out["uses_support"] = torch.tensor([_bitmask(i["depends_on"], "support") for i in infos])
            out["uses_failed"] = torch.tensor([_bitmask(i["depends_on"], "failed") for i in infos])
        for name, key in ORACLES.items():
            if name in DEFAULT_ZERO:
                out[name] = torch.tensor([float(i.get(key, 0.0)) for i in infos])
            elif infos and all(key in i for i in infos):
                out[name] = torch.tensor([float(i[key]) for i in infos])
        return out

    def _added(self, records: list[TurnRecord], extras: dict[int, dict[str, float]]) -> dict[str, Tensor]:
        """The tree brancher's per-row inputs (its ``writes``), their defaults on rows it does not name."""
        writes = self.tree.writes if self.tree is not None else {}
        out = {}
        for name in sorted(writes):
            default = writes[name]
            values = [extras.get(r.traj, {}).get(f"{name}@{r.step}", extras.get(r.traj, {}).get(name, default))
                      for r in records]
            dtype = torch.long if isinstance(default, int) else torch.float32
            out[name] = torch.tensor(values, dtype=dtype)
        return out
