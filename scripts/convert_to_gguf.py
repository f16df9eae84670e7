"""Convert a transformers checkpoint to GGUF with llama.cpp's own (unpatched) converter.

Usage: python scripts/convert_to_gguf.py LLAMA_CPP_SRC MODEL_DIR OUT.gguf [--outtype f32]

``LLAMA_CPP_SRC`` is the llama.cpp source tree (the one vendored in the
llama-cpp-python sdist; scripts/build_llama_server.sh keeps it beside the
binary). The converter names a model's BPE pre-tokenizer by hashing the
tokenization of a test string, and refuses hashes it does not know ("BPE
pre-tokenizer was not recognized"), which includes every small model trained
here. This wrapper registers one more case, in memory, without editing the
converter (and lets a model without ``tokenizer.model`` convert without the
sentencepiece package): a tokenizer whose pre-tokenizer is GPT-2's byte-level BPE
(``ByteLevel``, no prefix space, GPT-2's regex), optionally preceded by
``Digits(individual_digits=True)`` when no merge contains a digit (the shipped
reader), is written as ``gpt-2``. The two agree on every text except a run of
whitespace right before a digit; dprag sends token ids, not text, so the
server's tokenizer never changes what the model reads.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import Any

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}


def _is_byte_level(step: Any) -> bool:
    return isinstance(step, dict) and all(step.get(k) == v for k, v in _BYTE_LEVEL.items())


def _has_digit_merge(model: Any) -> bool:
    merges = model.get("merges", [])
    return any(any(c.isdigit() for c in (m if isinstance(m, str) else " ".join(m))) for m in merges)


def is_gpt2_pre_tokenizer(model_dir: Path) -> bool:
    """True if ``model_dir``'s tokenizer.json pre-tokenizes as GPT-2 (see the module docstring)."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return False
    spec = json.loads(path.read_text(encoding="utf-8"))
    pre = spec.get("pre_tokenizer")
    if _is_byte_level(pre):
        return True
    steps = pre.get("pretokenizers", []) if isinstance(pre, dict) else []
    digits = {"type": "Digits", "individual_digits": True}
    return (
        len(steps) == 2
        and steps[0] == digits
        and _is_byte_level(steps[1])
        and not _has_digit_merge(spec.get("model", {}))
    )


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit(__doc__)
    src, model_dir, out, *rest = (Path(argv[0]), Path(argv[1]), argv[2], *argv[3:])
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    import conversion.base as base  # the vendored converter's package

    original = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self: Any, tokenizer: Any) -> str:
        try:
            return str(original(self, tokenizer))
        except NotImplementedError:
            if is_gpt2_pre_tokenizer(Path(self.dir_model)):
                return "gpt-2"
            raise

    sentencepiece = base.TextModel._set_vocab_sentencepiece

    def set_vocab_sentencepiece(self: Any, *args: Any, **kwargs: Any) -> None:
        # without a tokenizer.model this fails with FileNotFoundError (the converter then
        # tries the other vocab kinds), but only after importing sentencepiece: skip that
        if not (Path(self.dir_model) / "tokenizer.model").is_file():
            raise FileNotFoundError("tokenizer.model")
        sentencepiece(self, *args, **kwargs)

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    base.TextModel._set_vocab_sentencepiece = set_vocab_sentencepiece
    sys.argv = ["convert_hf_to_gguf.py", str(model_dir), "--outfile", out, *rest]
    runpy.run_path(str(src / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
