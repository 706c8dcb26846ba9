"""The catalogue: every stage has components, docs/algorithms.md is current, `polo list` prints it."""
from pathlib import Path

from polo.catalog import catalog_markdown, catalog_text, recipe_rows
from polo.cli import main
from polo.core.registry import ADVANTAGES, CREDIT, POLICY_LOSSES
from polo.prompt_samplers.base import PROMPT_SAMPLERS


def test_docs_algorithms_is_generated_from_the_registries():
    path = Path(__file__).resolve().parent.parent / "docs" / "algorithms.md"
    assert path.read_text() == catalog_markdown(), "run: python -m polo.catalog > docs/algorithms.md"


def test_at_least_40_estimators_losses_samplers_and_credit():
    catalog_text()
    assert len(ADVANTAGES.names()) + len(POLICY_LOSSES.names()) + len(PROMPT_SAMPLERS.names()) + len(CREDIT.names()) >= 40


def test_every_recipe_cites_the_papers_of_its_components():
    for row in recipe_rows():
        assert row["papers"], row["recipe"]
        assert all("arXiv" in p or "arXiv id not found" in p for p in row["papers"]), row


def test_a_method_whose_mechanism_is_a_reward_cites_its_paper():
    """Con-GRPO's consistency term is the reward ``think_consistency`` (the rule judge), not a component: its row
    names MedAD-R1 and the reconstruction's provenance; GRPO's row names no reward's paper."""
    rows = {row["recipe"]: row for row in recipe_rows()}
    assert any("MedAD-R1" in p and "2602.01081" in p for p in rows["con_grpo"]["papers"])
    assert rows["con_grpo"]["provenance"] == "RECONSTRUCTED"
    assert not any("MedAD-R1" in p for p in rows["grpo"]["papers"])


def test_polo_list_prints_components_and_recipes(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "advantage (" in out and "grpo" in out and "recipes:" in out and "nlpo" in out
