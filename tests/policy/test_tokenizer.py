import random
import string

from transformers import AutoTokenizer

from polo.policy.tokenizer import CHARACTERS, build_char_tokenizer

PRINTABLE = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")


def test_one_token_per_character_and_exact_round_trip():
    tok = build_char_tokenizer()
    assert (tok.pad_token_id, tok.bos_token_id) == (0, 1) and tok.eos_token_id is not None
    assert set(PRINTABLE) <= set(CHARACTERS)
    rng = random.Random(0)
    texts = [PRINTABLE, "  two  spaces ,. n't\n\nend ", ""] + [
        "".join(rng.choice(PRINTABLE) for _ in range(rng.randint(1, 40))) for _ in range(50)
    ]
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == len(text)
        assert tok.decode(ids) == text
        with_bos = tok.encode(text)
        assert with_bos[0] == tok.bos_token_id and with_bos[1:] == ids
        assert tok.decode(with_bos, skip_special_tokens=True) == text


def test_save_and_reload(tmp_path):
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "x = (3 + 4) * 2\n  done."
    assert again.encode(text) == tok.encode(text)
    assert again.decode(again.encode(text, add_special_tokens=False)) == text
    assert (again.pad_token_id, again.bos_token_id, again.eos_token_id) == (0, 1, tok.eos_token_id)


def test_chat_template_renders_role_lines_and_survives_a_save(tmp_path):
    tok = build_char_tokenizer()
    messages = [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+2="}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<system>Add.\n<user>1+2=\n<assistant>"
    assert len(tok.encode(text, add_special_tokens=False)) == len(text)  # every character is in the vocabulary
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert again.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == text
