"""The built-in character-level tokenizer: one token per printable ASCII character, space and newline."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARACTERS = "\n" + "".join(chr(c) for c in range(32, 127))
CHAT_TEMPLATE = (
    "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
"""Each message as ``<role>content`` on its own line, then ``<assistant>`` to prompt the reply (plain characters,
so the character vocabulary covers it)."""


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Character tokenizer with ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, then the characters.

    It carries ``CHAT_TEMPLATE`` (used when ``model.chat_template`` is on). ``encode`` prepends ``<bos>`` (when ``add_special_tokens``); ``decode`` concatenates characters without
    spaces or clean-up, so ``decode(encode(s, add_special_tokens=False)) == s`` for printable ASCII ``s``.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(CHARACTERS))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
    )


def unknown_characters(texts: Iterable[str]) -> Counter:
    """Occurrences of each character of ``texts`` that ``build_char_tokenizer`` maps to ``<unk>``."""
    known = set(CHARACTERS)
    return Counter(c for text in texts for c in text if c not in known)
