"""LlamaIndex responses whose empty answer prints as the empty string.

LlamaIndex's ``Response.__str__`` returns ``self.response or "None"`` (and so do
its streaming responses, sync and async, and the ``Response`` their
``get_response()`` builds), so an empty DP answer (⊥ on the first token) would
print "None" and reach a chat history as the word "None". These subclasses
print ``""`` instead, and their ``get_response()`` gives a :class:`DPResponse`;
they are otherwise LlamaIndex's own classes.

>>> str(DPResponse(response="")), str(DPStreamingResponse(response_gen=iter([])))
('', '')
"""

from __future__ import annotations

from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)

__all__ = ["DPAsyncStreamingResponse", "DPResponse", "DPStreamingResponse"]


class DPResponse(Response):
    """A ``Response`` whose ``str`` is its text, ``""`` when empty.

    >>> str(DPResponse(response="aspirin"))
    'aspirin'
    """

    def __str__(self) -> str:
        return self.response or ""


class DPStreamingResponse(StreamingResponse):
    """A ``StreamingResponse`` whose ``str`` (the whole stream) is ``""`` when empty.

    >>> str(DPStreamingResponse(response_gen=iter(["a", "b"])))
    'ab'
    >>> str(DPStreamingResponse(response_gen=iter([])).get_response())
    ''
    """

    def __str__(self) -> str:
        super().__str__()  # drains the stream into response_txt
        return self.response_txt or ""

    def get_response(self) -> DPResponse:
        """The whole stream as a :class:`DPResponse`."""
        whole = super().get_response()
        return DPResponse(whole.response, whole.source_nodes, whole.metadata)


class DPAsyncStreamingResponse(AsyncStreamingResponse):
    """An ``AsyncStreamingResponse`` whose ``str`` is ``""`` when empty.

    >>> async def nothing():
    ...     return
    ...     yield
    >>> str(DPAsyncStreamingResponse(response_gen=nothing()))
    ''
    """

    async def _async_str(self) -> str:
        await super()._async_str()  # drains the stream into response_txt
        return self.response_txt or ""

    async def get_response(self) -> DPResponse:
        """The whole stream as a :class:`DPResponse`."""
        whole = await super().get_response()
        return DPResponse(whole.response, whole.source_nodes, whole.metadata)
