"""Differences between the langchain-core versions dprag supports (0.3 and 1.x).

>>> from langchain_core.messages import HumanMessage
>>> message_text(HumanMessage(content=[{"type": "text", "text": "Who?"}]))
'Who?'
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage

__all__ = ["message_text"]


def message_text(message: BaseMessage) -> str:
    """The text of a message (``.text`` is a method before langchain-core 1.0)."""
    text = message.text
    return str(text) if isinstance(text, str) else str(text())
