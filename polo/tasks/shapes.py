"""Generated image tasks for the vision-language policy (``model.kind: vision``): coloured shapes on a square
canvas, drawn with numpy (no image library, no downloads).

The canvas (``image_size`` px, default 32) is a ``grid × grid`` board of cells (default 4 × 4: with the
built-in tower's 8-px patches, one cell is one image token); each shape fills one cell, centred: a square or a
disk, small (half-width ``cell/4``) or large (``3·cell/8``), in one of ``colours`` palette colours, on a dark
background; a canvas holds 1 … ``max_shapes`` shapes in distinct random cells.

Tasks:

- ``shape_count``: ``"<image>how many red?"`` → the number of shapes of that colour (``"2"``), uniform in
  0 … ``max_shapes`` (no answer dominates; the other shapes take the other colours; with ``colours: 1`` every
  shape is red and the count is 1 … ``max_shapes``); ``correct`` iff the answer reads as that number.
- ``shape_score``: ``"<image>score?"`` → the picture's score ``s = (n + n_large) / (2·max_shapes)`` (n shapes,
  n_large of them large: a fuller canvas of bigger shapes scores higher) in [0, 1], written with one decimal
  (``"0.7"``, rounded half up); ``correct`` iff the answer reads as the same number (±0.005).

Example contract (read by the vision policy, through polo.tasks.images, and by the rewards):

- ``prompt``: ``"<image>"`` then the question; the vision policy expands the placeholder into its image tokens.
- ``columns["image"]``: the picture, ``polo.tasks.images.encode_image`` bytes (uint8 RGB ``[H, W, 3]``,
  row-major, H = W = ``image_size``); ``columns["count"]`` (int) and ``columns["colour"]`` (str) for
  ``shape_count``; ``columns["score"]`` (float in [0, 1], the exact value the answer writes) for ``shape_score``;
  both carry ``shapes`` (int, n) and ``large`` (int, n_large).
- ``answer``: the final answer text. With the knob ``think: true`` a demonstration (and a well-formed
  completion) is ``<think>REASONING</think><answer>ANSWER</answer>``: the reasoning counts the shapes one by one
  (``1,2,3``, or ``0``) for ``shape_count``, and reads ``n+n_large`` for ``shape_score``; the verifier then reads
  the ``<answer>`` block (polo.tasks.think_answer).

The train/test split hashes the picture's bytes (``problem_key``): a picture is never in both splits, whatever
question is asked about it.
"""
from __future__ import annotations

import hashlib
import random

import numpy as np
from pydantic import Field, model_validator

from polo.tasks.base import Example, Task
from polo.tasks.images import IMAGE_COLUMN, IMAGE_TOKEN, encode_image
from polo.tasks.registry import register_task
from polo.tasks.think_answer import answer_text, as_number

PALETTE = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (50, 90, 230), "yellow": (230, 210, 40),
           "white": (235, 235, 235)}
"""Shape colours, in the order the ``colours`` knob takes them."""
BACKGROUND = (20, 20, 28)


class ShapeTask(Task):
    """Shared canvas knobs and drawing of the shape tasks (module docstring)."""

    image_size: int = Field(32, gt=0)
    """Side of the picture in pixels (the vision model's ``model.vision.image_size``)."""
    grid: int = Field(4, ge=1)
    """Cells per side; each shape fills one cell."""
    max_shapes: int = Field(4, ge=1)
    """Most shapes on a canvas (at most grid²)."""
    colours: int = Field(3, ge=1, le=len(PALETTE))
    """Palette colours in use (red, green, blue, yellow, white, in that order)."""
    think: bool = False
    """Demonstrations (and the verifier) in the ``<think>…</think><answer>…</answer>`` format."""

    @model_validator(mode="after")
    def _fits(self) -> "ShapeTask":
        if self.image_size % self.grid or self.image_size // self.grid < 8:
            raise ValueError(f"image_size={self.image_size} must split into grid={self.grid} cells of at least 8 px "
                             f"(small and large shapes differ in size from there)")
        if self.max_shapes > self.grid**2:
            raise ValueError(f"max_shapes={self.max_shapes} shapes do not fit in grid={self.grid}² cells")
        return self

    def draw(self, rng: random.Random, colour: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """A canvas of ``len(colour)`` shapes of those palette indices in random cells, each a random kind and
        size: ``(picture [S, S, 3] uint8, large [n] bool)``."""
        n = len(colour)
        cells = np.array(rng.sample(range(self.grid**2), n), dtype=int)
        disk = np.array([rng.random() < 0.5 for _ in range(n)], dtype=bool)
        large = np.array([rng.random() < 0.5 for _ in range(n)], dtype=bool)
        return self.render(cells, np.array(colour, dtype=int), disk, large), large

    def render(self, cells: np.ndarray, colour: np.ndarray, disk: np.ndarray, large: np.ndarray) -> np.ndarray:
        """The picture of shapes in ``cells`` (each ``[n]``): every shape's mask at once, ``[n, S, S]``."""
        cell = self.image_size // self.grid
        centre_y, centre_x = (cells // self.grid) * cell + cell // 2, (cells % self.grid) * cell + cell // 2
        half = np.where(large, 3 * cell // 8, cell // 4)[:, None, None]
        ys, xs = np.mgrid[: self.image_size, : self.image_size]
        dy, dx = ys - centre_y[:, None, None], xs - centre_x[:, None, None]
        square = np.maximum(abs(dy), abs(dx)) <= half
        round_ = dy**2 + dx**2 <= half**2 + half
        masks = np.where(disk[:, None, None], round_, square)
        palette = np.array(list(PALETTE.values()))[colour] - np.array(BACKGROUND)
        picture = np.array(BACKGROUND) + (masks[..., None] * palette[:, None, None, :]).sum(0)
        return picture.astype(np.uint8)

    def problem_key(self, example: Example) -> str:
        return hashlib.blake2b(example.columns[IMAGE_COLUMN], digest_size=16).hexdigest()

    def final_answer(self, completion: str) -> float | None:
        """The number a completion answers (with ``think``: its ``<answer>`` block, which it must have), else None."""
        if not self.think:
            return as_number(completion)
        answer = answer_text(completion)
        return None if answer == completion else as_number(answer)

    def formatted(self, reasoning: str, answer: str) -> str:
        return f"<think>{reasoning}</think><answer>{answer}</answer>" if self.think else answer

    @property
    def max_completion_chars(self) -> int:
        return max(len(self.demonstration(e)) for e in self.extreme_examples())

    def extreme_examples(self) -> list[Example]:
        """Examples with the longest demonstrations (for ``max_completion_chars``)."""
        raise NotImplementedError


@register_task("shape_count")
class ShapeCount(ShapeTask):
    """How many shapes of one colour the picture shows."""

    def sample(self, rng: random.Random) -> Example:
        """The asked colour's count is uniform in 0 … max_shapes (no answer dominates), the other shapes (up to
        max_shapes in all, at least one) take the other colours."""
        asked = rng.randrange(self.colours)
        others = [c for c in range(self.colours) if c != asked]
        count = rng.randint(0 if others else 1, self.max_shapes)
        n = rng.randint(max(count, 1), self.max_shapes) if others else count
        colour = [asked] * count + [rng.choice(others) for _ in range(n - count)]
        picture, large = self.draw(rng, colour)
        name = list(PALETTE)[asked]
        return Example(f"{IMAGE_TOKEN}how many {name}?", str(count),
                       {IMAGE_COLUMN: encode_image(picture), "colour": name, "count": count,
                        "shapes": n, "large": int(large.sum())})

    def demonstration(self, example: Example) -> str:
        count = int(example.answer)
        return self.formatted(",".join(str(i) for i in range(1, count + 1)) or "0", example.answer)

    def is_correct(self, completion: str, example: Example) -> bool:
        return self.final_answer(completion) == int(example.answer)

    def extreme_examples(self) -> list[Example]:
        return [Example("", str(self.max_shapes))]


@register_task("shape_score")
class ShapeScore(ShapeTask):
    """The picture's score ``(n + n_large) / (2·max_shapes)`` with one decimal (module docstring)."""

    max_shapes: int = Field(5, ge=1)
    """Most shapes on a canvas; 5 makes every score a multiple of 0.1."""

    def sample(self, rng: random.Random) -> Example:
        picture, large = self.draw(rng, [rng.randrange(self.colours) for _ in range(rng.randint(1, self.max_shapes))])
        shapes, n_large = len(large), int(large.sum())
        tenths = (10 * (shapes + n_large) + self.max_shapes) // (2 * self.max_shapes)  # 10·s rounded half up
        score = tenths / 10
        return Example(f"{IMAGE_TOKEN}score?", f"{score:.1f}",
                       {IMAGE_COLUMN: encode_image(picture), "score": score, "shapes": shapes, "large": n_large})

    def demonstration(self, example: Example) -> str:
        return self.formatted(f"{example.columns['shapes']}+{example.columns['large']}", example.answer)

    def is_correct(self, completion: str, example: Example) -> bool:
        value = self.final_answer(completion)
        return value is not None and abs(value - float(example.answer)) < 0.005

    def extreme_examples(self) -> list[Example]:
        return [Example("", "1.0", {"shapes": self.max_shapes, "large": self.max_shapes})]
