"""Exceptions of the fxremat Python package (no torch import here)."""


class FormatError(ValueError):
    """A serialized fxremat graph is malformed or uses something this reader does not know.

    The message names the JSON location (``nodes[3].args[1]``) and, where there is one,
    the node.
    """


class ExportError(RuntimeError):
    """A program could not be exported as a joint forward/backward graph."""


class UnsupportedGraphError(ValueError):
    """An FX graph holds something the fxremat format cannot encode; names the node."""
