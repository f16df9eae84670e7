"""Any LangChain chat model or LLM as a dprag ``TextModel`` (for DP-KSA and friends).

Text-level mechanisms only need completions, so any ``BaseChatModel`` or
``BaseLLM`` works, also wrapped the way apps configure them:
``.bind(stop=...)``, ``.with_retry()``, ``.with_fallbacks([...])``,
``.with_config(...)`` (:mod:`langchain_dprag._wrappers` takes the wrapper
apart and does what it does on the sealed path; anything it cannot seal is
refused when the ``LangChainTextModel`` is built). Prompts given to a
``TextModel`` contain private documents, so every call goes to the model with
nothing attached, by any route: it runs on a private copy of each model
(``callbacks``, ``cache``, ``verbose``, ``tags`` and ``metadata`` removed)
through the model's own generation method (``_generate_with_cache`` for chat
models, ``_generate`` for LLMs), *below* LangChain's callback machinery. So no
``CallbackManager`` is ever built for these calls: callbacks passed to the
model's constructor, set later or attached by ``with_config`` /
``with_listeners``, handlers of ``register_configure_hook`` (switched on by
config or by their environment variable), ``set_debug`` / ``set_verbose``
printers, LangSmith tracing and instrumentors that patch the callback manager
(OpenInference, MLflow autolog) are never reached, and neither is the global
LLM cache (``set_llm_cache``), which would store the prompts. The calls are
quiet (:mod:`dprag_core.quiet_logs`): no log record, warning or Python-level
stdout/stderr write made during them is shown.
The model's ``rate_limiter`` still applies. What is lost: these calls do not
appear in traces or token-usage callbacks (on purpose: the voter prompts'
token counts depend on the documents' lengths).

Token-level mechanisms (DPSparseVote, DPVote, DP-ICL) need next-token
log-probabilities, which LangChain's model wrappers do not expose: give them a
``dprag_core.models.hf.HFTokenModel`` directly.

>>> from langchain_core.language_models import FakeListChatModel
>>> LangChainTextModel(FakeListChatModel(responses=["aspirin"])).generate(["Which drug?"])
['aspirin']
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables.config import ContextThreadPoolExecutor

from dprag_core.models.envelope import DEFAULT_PROMPT_BYTES, keep_last_bytes
from dprag_core.quiet_logs import muted_logs
from dprag_core.validation import positive_int, strict_init
from langchain_dprag._wrappers import acomplete, complete, sealed, unwrap

__all__ = ["LangChainTextModel"]


class LangChainTextModel:
    """Adapts a LangChain ``BaseChatModel`` / ``BaseLLM`` to dprag's ``TextModel``.

    ``model`` may be wrapped in ``bind`` / ``with_retry`` / ``with_fallbacks`` /
    ``with_config``; each call runs on private copies of the models inside,
    below the callback machinery (see the module docstring).

    ``max_concurrency`` caps the parallel requests of one ``generate`` call;
    ``max_tokens_param`` names the model's keyword for the completion length
    (``"max_tokens"`` for most chat APIs); when ``None`` the model's own setting
    applies and ``max_new_tokens`` is ignored.

    ``max_prompt_bytes`` (public, default 16384): every prompt keeps its last that
    many UTF-8 bytes (:mod:`dprag_core.models.envelope` says why, and how to choose it).

    >>> from langchain_core.language_models import FakeListLLM
    >>> LangChainTextModel(FakeListLLM(responses=["a", "b"])).generate(["x", "y"])
    ['a', 'b']
    """

    @strict_init
    def __init__(
        self,
        model: Any,
        *,
        max_concurrency: int | None = None,
        max_tokens_param: str | None = None,
        max_prompt_bytes: int = DEFAULT_PROMPT_BYTES,
    ) -> None:
        self._plan = unwrap(model)  # refuses what cannot be sealed
        self.model = model
        self.max_concurrency = (
            None if max_concurrency is None else positive_int("max_concurrency", max_concurrency)
        )
        self.max_tokens_param = max_tokens_param
        self.max_prompt_bytes = positive_int("max_prompt_bytes", max_prompt_bytes)

    def _cut(self, prompts: Sequence[str]) -> list[str]:
        """Each prompt's last ``max_prompt_bytes`` bytes (the public width)."""
        return [keep_last_bytes(p, self.max_prompt_bytes) for p in prompts]

    def _kwargs(self, max_new_tokens: int) -> dict[str, Any]:
        positive_int("max_new_tokens", max_new_tokens)
        return {} if self.max_tokens_param is None else {self.max_tokens_param: max_new_tokens}

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One completion per user-message prompt (``max_concurrency`` threads at a time)."""
        kwargs = self._kwargs(max_new_tokens)
        plan, prompts = sealed(self._plan), self._cut(prompts)
        with muted_logs(), ContextThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(lambda p: complete(plan, p, kwargs), prompts))

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """:meth:`generate`'s requests, one per prompt; None where a prompt's own request
        failed (a content filter), its error dropped, nothing sent again
        (:mod:`dprag_core.models.outcomes`). A ``with_retry`` inside ``model`` still
        retries what it is configured to: retry transient errors only
        (``retry_if_exception_type``), or a refused prompt adds its retries' requests."""
        kwargs = self._kwargs(max_new_tokens)
        plan, prompts = sealed(self._plan), self._cut(prompts)

        def one(prompt: str) -> str | None:
            try:
                return complete(plan, prompt, kwargs)
            except Exception:
                return None

        with muted_logs(), ContextThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(one, prompts))

    async def agenerate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """Like :meth:`generate`, with asyncio concurrency (``max_concurrency`` at a time)."""
        kwargs = self._kwargs(max_new_tokens)
        plan, prompts = sealed(self._plan), self._cut(prompts)
        limit = asyncio.Semaphore(self.max_concurrency or len(prompts) or 1)

        async def one(prompt: str) -> str:
            async with limit:
                return await acomplete(plan, prompt, kwargs)

        with muted_logs():  # the tasks copy this context
            return list(await asyncio.gather(*(one(p) for p in prompts)))

    def __repr__(self) -> str:
        return f"LangChainTextModel({type(self.model).__name__})"
