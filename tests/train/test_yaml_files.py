"""The strict YAML reader: duplicate keys, alias expansion bound, recursion, size."""
import pytest
import yaml

from polo.core.registry import ConfigError
from polo.train.yaml_files import MAX_NODES, expanded_size, load_yaml, read_yaml_mapping


def test_anchors_aliases_and_merges_still_work():
    text = "base: &b {lr: 0.1, steps: 3}\nrun: {<<: *b, steps: 5}\nlist: [*b, *b]\n"
    tree = load_yaml(text, "t")
    assert tree["run"] == {"lr": 0.1, "steps": 5}  # a merged key may be overridden: not a duplicate
    assert tree["list"] == [{"lr": 0.1, "steps": 3}] * 2


def test_duplicate_key_names_both_lines():
    with pytest.raises(yaml.YAMLError, match=r"duplicate key 'a' \(first given on line 2\)") as err:
        load_yaml("x: 1\na: 1\nb: 2\na: 3\n", "t")
    assert err.value.problem_mark.line + 1 == 4


def test_expansion_is_counted_once_per_node_and_bounded():
    # 9 levels of 9 aliases each: 9**9 ≈ 3.9e8 leaves if expanded, 90 distinct nodes to visit
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    loader = yaml.SafeLoader("\n".join(levels[:4]))
    assert expanded_size(loader.get_single_node(), "t") == 1 + sum(2 + sum(9 ** j for j in range(1, k + 2))
                                                                   for k in range(4))
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES:,} YAML nodes"):
        load_yaml("\n".join(levels), "bomb.yaml")


@pytest.mark.parametrize("text, message", [
    ("a: &a [1, *a]\n", "recursive alias"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
])
def test_recursion_and_depth_are_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        load_yaml(text, "t")


def test_empty_document_and_file_size(tmp_path):
    assert load_yaml("", "t") is None
    big = tmp_path / "big.yaml"
    big.write_text("a: '" + "x" * 1_000_001 + "'\n")
    with pytest.raises(ConfigError, match="limited to 1,000,000 bytes"):
        read_yaml_mapping(big, "a recipe")
