"""The error raised when something fails while private documents are in use.

One class for the whole package: :class:`dprag_core.errors.PrivateDataError`,
the one fixed failure of a private section, raised by the one sanitiser
:func:`dprag_core.errors.guarded` (see there what is withheld, and the data
owner's debug switch
:func:`~dprag_core.errors.reveal_private_errors`). Re-exported here for
LangChain users.

>>> PrivateDataError is __import__("dprag_core.errors").errors.PrivateDataError
True
"""

from __future__ import annotations

from dprag_core.errors import PrivateDataError, guarded, reveal_private_errors

__all__ = ["PrivateDataError", "guarded", "reveal_private_errors"]
