"""``KBLookup-v0``: answer a one- or two-hop question about a small knowledge base through a search tool."""
from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field, PrivateAttr

from polo.envs.base import Environment, Transition
from polo.envs.registry import register_environment
from polo.envs.render import TURN_SEP

WORD = re.compile(r"[a-z0-9]+")
SYLLABLES = ["ka", "lo", "mi", "ru", "te", "va", "zo", "pe", "ni", "su"]
CITIES = ["rim", "oak", "bay", "elm", "fen", "ash"]
PETS = ["cat", "dog", "owl", "fox", "yak", "emu"]
MEMORY_CHARS = 24


def words_of(text: str) -> list[str]:
    """The lowercase words of ``text`` (runs of letters and digits)."""
    return WORD.findall(text.lower())


def search(name: str) -> str:
    """Look an entity up in the knowledge base: its friend, city and pet, or none for an unknown name.

    Args:
        name: The entity's name, as the question or an earlier search result spells it.
    """
    return f"s:{name}"


def answer(value: str) -> str:
    """Give the final answer to the question; this ends the episode.

    Args:
        value: The answer: one name, city or pet.
    """
    return f"a:{value}"


def note(text: str) -> str:
    """Replace the memory with a note of at most 24 characters.

    Args:
        text: The note to keep.
    """
    return f"m:{text}"


def search2(name: str) -> str:
    """Look an entity up, then its friend, in one turn.

    Args:
        name: The entity's name.
    """
    return f"s2:{name}"


@register_environment("KBLookup-v0")
class KBLookup(Environment):
    """Multi-hop lookup: search entities with ``s:<name>``, answer with ``a:<value>``; +1 for the right answer.

    Generation: names ``rng.choice(SYL) + rng.choice(SYL)`` are drawn until ``n_ent`` are distinct; then, for
    each name in creation order, its friend (``rng.choice`` of the other names in creation order), city and
    pet; then the subject ``x = rng.choice(names)``, the attribute ``rng.choice(["pet", "city"])`` and
    ``two_hop = rng.random() < p_two_hop``. The question is ``"q: <attr> of friend of <x>?"`` (two hops) or
    ``"q: <attr> of <x>?"``; the gold chain is ``[x, friend]`` or ``[x]`` and ``gold`` the attribute of its
    last entity. ``s:<name>`` returns ``"<name>: f=<friend> c=<city> p=<pet>"``, or ``"none"`` with
    ``tool_error`` for an unknown name; ``a:<value>`` returns ``"done"`` and terminates (reward 1 when it is
    the gold, else 0); anything else returns ``"invalid"`` (``valid`` false, reward ``-format_penalty``).
    Variants: ``memory`` adds ``m:<text>`` (at most 24 characters; replaces the memory, returns ``"ok"``) and
    renders the context as ``"<question>|m:<memory>|<last observation>"``; ``skills`` adds ``s2:<name>``, a
    search of the name then of its friend in one turn (the observations joined by ``", "``).
    Oracles per step: ``ev`` (1.0 when the step retrieved a gold-chain entity not retrieved before),
    ``hops_resolved`` (gold-chain entities retrieved so far) and ``depends_on``, a list of ``(turn, kind)``
    edges to earlier turns (0-based): ``"support"`` when a word of this action's argument is an entity or
    value of that turn's successful observation, ``"failed"`` when this search retries the tool after that
    turn's search returned ``none``. The expert searches the gold-chain entities not yet retrieved in order
    (``s2:`` for both at once with skills), writes ``"<entity> <c|p>=<gold>"`` to memory (memory variant),
    then answers. A memory write also reports ``memory_write`` (1.0), ``memory_before`` (the memory it
    replaced), ``memory_after`` and ``memory_relevance`` (``relevance``). The answer probe is ``"a:" + gold``.
    Its tools, for a chat checkpoint's function calling (``tools()``): ``search(name)`` and ``answer(value)``, with
    memory ``note(text)``, with skills ``search2(name)``, each giving the action text above.
    """

    provenance = "RECONSTRUCTED"
    deterministic: ClassVar[bool] = True
    copyable: ClassVar[bool] = True
    max_action_chars: ClassVar[int] = 2 + MEMORY_CHARS
    """The longest action: a memory write ``m:`` of 24 characters."""
    probe_prefix: ClassVar[str | None] = "a:"

    n_ent: int = Field(8, ge=2, le=100)
    """Entities in the knowledge base (at most the 100 two-syllable names)."""
    p_two_hop: float = Field(0.7, ge=0.0, le=1.0)
    """Probability that the question asks about the subject's friend."""
    max_turns: int = Field(4, ge=1)
    """Steps before the episode is truncated."""
    format_penalty: float = Field(0.0, ge=0.0)
    """Subtracted for an invalid action."""
    memory: bool = False
    """Memory variant: the ``m:<text>`` action, and a context of question, memory and last observation only."""
    skills: bool = False
    """Skill variant: the composite ``s2:<name>`` action."""

    _kb: dict[str, tuple[str, str, str]] = PrivateAttr(default_factory=dict)
    _attr: str = PrivateAttr("")
    _chain: list[str] = PrivateAttr(default_factory=list)
    _gold: str = PrivateAttr("")
    _retrieved: list[str] = PrivateAttr(default_factory=list)
    _memory: str = PrivateAttr("")
    _log: list[tuple[frozenset[str], bool]] = PrivateAttr(default_factory=list)
    """Per turn: the entities and values its observation showed, and whether its search failed."""
    _seen_names: list[str] = PrivateAttr(default_factory=list)
    _seen_values: list[str] = PrivateAttr(default_factory=list)

    @property
    def turn_limit(self) -> int:
        return self.max_turns

    @property
    def gold(self) -> str:
        """The answer value (the answer probe is the context then ``"|a:" + gold``)."""
        self._check_started()
        return self._gold

    @property
    def chain(self) -> list[str]:
        """The gold chain: the subject, then its friend for a two-hop question."""
        self._check_started()
        return list(self._chain)

    def _generate(self, rng: random.Random) -> str:
        names: list[str] = []
        while len(names) < self.n_ent:
            name = rng.choice(SYLLABLES) + rng.choice(SYLLABLES)
            if name not in names:
                names.append(name)
        self._kb = {}
        for name in names:
            friend = rng.choice([other for other in names if other != name])
            self._kb[name] = (friend, rng.choice(CITIES), rng.choice(PETS))
        x = rng.choice(names)
        self._attr = rng.choice(["pet", "city"])
        two_hop = rng.random() < self.p_two_hop
        self._chain = [x, self._kb[x][0]] if two_hop else [x]
        self._gold = self._kb[self._chain[-1]][2 if self._attr == "pet" else 1]
        self._retrieved, self._memory, self._log, self._seen_names, self._seen_values = [], "", [], [x], []
        return f"q: {self._attr} of {'friend of ' if two_hop else ''}{x}?"

    def _transition(self, action: str) -> Transition:
        kind, _, arg = action.partition(":")
        if kind == "s" or (kind == "s2" and self.skills):
            names = [arg, self._kb[arg][0]] if kind == "s2" and arg in self._kb else [arg]
            return self._search(names)
        if kind == "a":
            right = arg == self._gold
            return self._outcome("done", float(right), [arg], terminated=True, success=right)
        if kind == "m" and self.memory and len(arg) <= MEMORY_CHARS:
            before, self._memory = self._memory, arg
            out = self._outcome("ok", 0.0, arg.split())
            return out._replace(oracles={**out.oracles, "memory_write": 1.0, "memory_before": before, "memory_after": arg,
                                         "memory_relevance": self.relevance(before, arg)})
        return self._outcome("invalid", -self.format_penalty, valid=False)

    def _search(self, names: list[str]) -> Transition:
        if names[0] not in self._kb:
            return self._outcome("none", 0.0, names, search=True, tool_error=True)
        new = [name for name in names if name in self._chain and name not in self._retrieved]
        self._retrieved += new
        shown = [[name, *self._kb[name]] for name in names]
        self._remember(self._seen_names, (word for row in shown for word in row[:2]))
        self._remember(self._seen_values, (word for row in shown for word in row[2:]))
        observation = ", ".join("{}: f={} c={} p={}".format(*row) for row in shown)
        return self._outcome(observation, 0.0, names[:1], search=True, ev=float(bool(new)),
                             ids=frozenset(word for row in shown for word in row))

    def _outcome(self, observation: str, reward: float, words: Sequence[str] = (), search: bool = False,
                 ev: float = 0.0, ids: frozenset[str] = frozenset(), **flags: bool) -> Transition:
        """The step's transition (``flags``: terminated, success, valid, tool_error) with its oracles;
        ``depends_on`` links the action's ``words`` to earlier turns, then this turn is logged."""
        depends_on = self._depends_on(words, search)
        self._log.append((ids, flags.get("tool_error", False)))
        oracles = {"ev": ev, "hops_resolved": len(self._retrieved), "depends_on": depends_on}
        return Transition(observation, reward, oracles=oracles, **flags)

    def _depends_on(self, words: list[str], search: bool) -> list[tuple[int, str]]:
        edges = []
        for turn, (ids, failed) in enumerate(self._log):
            if failed and search:
                edges.append((turn, "failed"))
            elif ids.intersection(words):
                edges.append((turn, "support"))
        return edges

    def relevance(self, before: str, after: str) -> float:
        """HiMPO's hindsight relevance of a memory write: the share of the gold evidence words (the chain's
        entities and the gold value) among the words ``after`` adds to ``before`` (words split at non-letters
        and non-digits)."""
        evidence = set(self._chain) | {self._gold}
        added = set(words_of(after)) - set(words_of(before))
        return len(evidence & added) / len(evidence)

    def observation_argument(self, action: str) -> int | None:
        """Searches: ``s:`` (2 characters) or, with skills, ``s2:`` (3) before the searched name."""
        kind, sep, _ = action.partition(":")
        return len(kind) + 1 if sep and (kind == "s" or (kind == "s2" and self.skills)) else None

    def alternative(self, action: str) -> str | None:
        """Skill variant: ``s2:<name>`` ↔ ``s:<name>`` for a name in the knowledge base."""
        kind, _, arg = action.partition(":")
        if not self.skills or arg not in self._kb:
            return None
        return {"s": f"s2:{arg}", "s2": f"s:{arg}"}.get(kind)

    @staticmethod
    def _remember(seen: list[str], words) -> None:
        seen += [word for word in dict.fromkeys(words) if word not in seen]

    def render(self, history: Sequence[tuple[str, str]], window: int = 4) -> str:
        """Memory variant: ``"<question>|m:<memory>|<last observation>"`` (no observation before the first step);
        otherwise the last ``window`` turns."""
        if not self.memory:
            return super().render(history, window)
        return TURN_SEP.join([self.prompt, f"m:{self._memory}", *(obs for _, obs in history[-1:])])

    @property
    def plain_history(self) -> bool:
        return not self.memory

    def tools(self) -> list:
        """``search`` and ``answer``; ``note`` with memory, ``search2`` with skills (each gives its action text)."""
        return [search, answer, *([note] if self.memory else []), *([search2] if self.skills else [])]

    def expert(self) -> str:
        self._check_open()
        missing = [name for name in self._chain if name not in self._retrieved]
        if missing:
            return f"s2:{missing[0]}" if self.skills and len(missing) == 2 else f"s:{missing[0]}"
        note = f"{self._chain[-1]} {self._attr[0]}={self._gold}"
        return f"m:{note}" if self.memory and self._memory != note else f"a:{self._gold}"

    def valid_actions(self) -> list[str]:
        """Searches of the names seen so far (the subject, then those observations showed) and answers with
        the cities and pets seen so far."""
        return [f"s:{name}" for name in self._seen_names] + [f"a:{value}" for value in self._seen_values]
