"""Prompt templates in component settings: ``str.format`` strings with named fields."""
from __future__ import annotations


def check_template(template: str, fields: tuple[str, ...], optional: tuple[str, ...] = ()) -> str:
    """``template`` if it formats with ``fields`` and ``optional`` and uses each of ``fields`` (a pydantic
    validator's ValueError otherwise, naming the template and the fields)."""
    try:
        template.format(**dict.fromkeys((*fields, *optional), ""))
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"template {template!r} may use only the fields {{{'}, {'.join((*fields, *optional))}}} "
                         f"(write a literal brace as {{{{ or }}}}): {type(err).__name__}: {err}") from None
    missing = [f for f in fields if "{" + f + "}" not in template]
    if missing:
        raise ValueError(f"template {template!r} lacks the field(s) {', '.join(missing)}")
    return template


def render(template: str, example, completion: str) -> str:
    """A judge's text: ``template`` with the example's ``{prompt}``, ``{answer}`` and ``{rubric}`` (its ``rubric``
    column, empty when it has none) and the ``{response}`` filled in."""
    rubric = example.columns.get("rubric")
    return template.format(prompt=example.prompt, response=completion, answer=example.answer,
                           rubric="" if rubric is None else str(rubric))
