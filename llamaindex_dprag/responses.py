"""LlamaIndex responses whose empty answer prints as the empty string.

LlamaIndex's ``Response.__str__`` returns ``self.response or "None"``, so an
empty DP answer (⊥ on the first token) would print "None" and reach a chat
history as the word "None". These subclasses print ``""`` instead; they are
otherwise LlamaIndex's own classes.

>>> str(DPResponse(response="")), str(DPStreamingResponse(response_gen=iter([])))
('', '')
"""

from __future__ import annotations

from llama_index.core.base.response.schema import Response, StreamingResponse

__all__ = ["DPResponse", "DPStreamingResponse"]


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
    """

    def __str__(self) -> str:
        super().__str__()  # drains the stream into response_txt
        return self.response_txt or ""
