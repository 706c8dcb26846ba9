"""The ``socratic`` engine: ``multi_turn`` episodes in which a teacher answers each wrong attempt with a Socratic
hint and the student tries again (SOPO, "Socratic-guided Policy Optimization"; no arXiv id found, reconstructed
from the abstract).

The environment decides when a hint is due: it flags the turn with its ``hint`` oracle (GuessNum's
``teacher_hints``: a wrong guess). ``hints.source`` decides who writes it (polo.engines.hints):

* ``template``: the environment writes it into its own observation (GuessNum's rule: ask the kind of number, then
  a bisecting question), and the engine adds nothing;
* ``teacher``: the environment only flags the turn (GuessNum's ``hint_text: false``) and the ``teacher`` role
  writes the hint from ``hints.ask``. SOPO's teacher knows the ground truth, so the default ask shows it the
  environment's answer (``{gold}``) besides the context so far, the failed attempt and the reply to it. The hint
  is appended to that observation in the episode's history before the next context is rendered: one batched
  teacher call per turn serves every episode that asks.

The ``hint`` step input (1 on a hinted turn) is the environment's flag either way; the ``sopo`` advantage counts
attempts from it. Metrics (``source: teacher``): ``log_metric/hints/written`` (teacher hints per call) and
``log_metric/hints/empty_frac`` (the share of them the teacher left empty: nothing is appended then).
"""
from __future__ import annotations

from pydantic import PrivateAttr

from polo.core.registry import ConfigError
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.episodes import Episode
from polo.engines.hints import HintRequest, Hints, with_hint
from polo.engines.multi_turn import MultiTurn


class SocraticHints(Hints):
    """``Hints`` whose teacher knows the answer."""

    ask: str = "{context}{action};{observation}|answer: {gold}|hint:"
    """What SOPO's teacher reads: the context so far, the wrong attempt, the reply to it and the answer it knows
    (``{context}`` and any of ``{action}``, ``{observation}``, ``{error}``, ``{gold}``)."""


@ENGINES.register("socratic")
class Socratic(MultiTurn):
    """``multi_turn`` whose flagged turns get a hint from ``hints.source`` (see the module docstring)."""

    paper = "SOPO: Socratic-guided Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"

    hints: SocraticHints = SocraticHints()
    """Who writes the hint after a flagged (wrong) turn: ``{source: template}`` (the environment's text) or
    ``{source: teacher}`` (the teacher role, from ``ask``)."""

    _playing: list[Episode] = PrivateAttr(default_factory=list)
    _answered: set[tuple[int, int]] = PrivateAttr(default_factory=set)

    def roles(self) -> set[str]:
        return super().roles() | self.hints.roles()

    def setup(self, setup: EngineSetup) -> None:
        super().setup(setup)
        env = setup.task.make_env()
        writes = getattr(env, "hint_text", None)
        if writes is not None and writes != (self.hints.source == "template"):
            fix = "false" if writes else "true"
            raise ConfigError(f"engine.hints.source={self.hints.source}: {env.name} "
                              f"{'writes' if writes else 'does not write'} its own hint text; set "
                              f"task.env.hint_text={fix} or the other source")

    def play(self, policy, episodes: list[Episode], generator, greedy: bool, **kwargs) -> list[dict]:
        self._playing, self._answered = episodes, set()
        try:
            return super().play(policy, episodes, generator, greedy, **kwargs)
        finally:
            self._playing = []

    def context(self, episode: Episode, chat: bool):
        """The task's rendering, after the teacher's hint was appended to a flagged last turn: the first context a
        turn renders for a due episode has the teacher write the hints of every due episode being played."""
        if self.hints.source == "teacher" and self._due(episode):
            self._answer([ep for ep in self._playing if self._due(ep)])
        return super().context(episode, chat)

    def _due(self, episode: Episode) -> bool:
        """Whether the episode's last turn asked for a hint the teacher has not written yet."""
        if episode.done or not episode.records:
            return False
        last = episode.records[-1]
        return bool(last.info.get("hint")) and (episode.traj, last.step) not in self._answered

    def _answer(self, episodes: list[Episode]) -> None:
        """The teacher's hints for ``episodes``' last turns, appended to those turns' observations."""
        records = [ep.records[-1] for ep in episodes]
        hints = self.hints.write(self.settings, [
            HintRequest(r.context_text, r.action, r.observation, "wrong answer", r.gold, "") for r in records],
            "engine.hints")
        for ep, record, hint in zip(episodes, records, hints):
            self._answered.add((ep.traj, record.step))
            if hint:
                action, observation = ep.history[-1]
                ep.history[-1] = (action, with_hint(observation, hint))
