"""The package's one exception type."""

from __future__ import annotations


class QmoeError(ValueError):
    """A qmoe call failed.

    Attributes:
        code: the library's status code — 161001 (a required argument is missing), 161002 (an
            invalid rank, shape, dtype, format, limit or groupList value), 361001 (runtime
            failure) or 561000 (out of memory / internal).
        name: the code's symbolic name, e.g. ``"QMOE_ERR_PARAM_INVALID"``.
        message: the library's explanation (which argument, which rule, which value).
        rule: for errors the C library reports, the rule's name (``"QMOE_RULE_SHAPE"``,
            ``"QMOE_RULE_DTYPE"``, ...; see qmoe_error_rule in qmoe.h); "" for errors raised by
            the Python layer itself.
        arg: the argument the error is about, by the name of the Python function's argument
            (``"x_scale"``), or "" when it is not about one argument.
    """

    def __init__(self, code: int, message: str, name: str = "", rule: str = "",
                 arg: str = "") -> None:
        self.code = int(code)
        self.name = name
        self.message = message
        self.rule = rule
        self.arg = arg
        super().__init__(f"[{code}{' ' + name if name else ''}] {message}")
