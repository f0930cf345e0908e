"""Exact numbers are compared exactly: math-verify's float tolerance is a veto-free zone only for written decimals.

math-verify ends its comparison of two numbers with a numeric check under a fixed tolerance, so two *different*
exact values of very small or very large magnitude pass as equal (``1/3^40`` against ``1/3^41``, ``1/50!`` against
``1/52!``). A wrong verdict is a wrong gradient, so every acceptance of two numeric values is re-checked here:

* both sides exact (no decimal literal anywhere): equal only when their difference vanishes at a precision scaled
  to their magnitude (60 significant digits; the relative gap has to be below 10^-45) — in effect exact;
* a side is a written decimal (``0.3333333``, ``8.2\\times10^{-20}``): equal only when the other value rounds to
  it at the place of its last written digit, and a written zero never stands for a non-zero value.

This module only ever *withdraws* an acceptance; it never accepts what math-verify rejected.
"""

from __future__ import annotations

import re

import sympy

DIGITS = 60  # working precision of the exact check
EXACT_GAP = (
    sympy.Float(10, DIGITS) ** -45
)  # relative difference below which two exact values are the same number
_SPACES = re.compile(r"\\[,;:! ]|\s+")
_DECIMAL = re.compile(
    r"^[+-]?(?P<int>\d*)(?:\.(?P<frac>\d*))?"
    r"(?:[eE](?P<e>[+-]?\d+)|(?:\\times|\\cdot|\*|x)10\^(?:\{(?P<b>[+-]?\d+)\}|(?P<c>[+-]?\d)))?$"
)


def _has_decimal(expr: sympy.Basic) -> bool:
    return bool(expr.atoms(sympy.Float))


def last_digit_place(text: str) -> sympy.Rational | None:
    """The place value of the last written digit of a decimal literal (``0.333`` -> 1/1000), else None."""
    t = _SPACES.sub("", text.strip().strip("$"))
    m = _DECIMAL.match(t)
    if not m or not (m.group("int") or m.group("frac")):
        return None
    exponent = int(m.group("e") or m.group("b") or m.group("c") or 0)
    return sympy.Rational(10) ** (exponent - len(m.group("frac") or ""))


def _numeric(expr: object) -> bool:
    return isinstance(expr, sympy.Expr) and not expr.free_symbols


def _real(expr: object) -> sympy.Float:
    value = sympy.Float(sympy.N(expr, DIGITS), DIGITS)
    if not value.is_finite:
        raise ArithmeticError("not a finite real number")
    return value


def withdrawn(gold: object, pred: object, gold_text: str, pred_text: str) -> str | None:
    """Why an acceptance of ``pred`` for ``gold`` does not hold exactly, or None when it stands (or is not ours to
    judge: symbols, sets, relations and matrices keep math-verify's own symbolic decision)."""
    if not (_numeric(gold) and _numeric(pred)):
        return None
    try:  # real numbers only; anything sympy cannot evaluate to one keeps math-verify's decision
        g, p = _real(gold), _real(pred)
        gap = abs(_real(gold - pred))  # type: ignore[operator]
    except (
        Exception
    ):  # sympy raises many types here (Relational truth, Polynomial errors): not a plain number
        return None
    if not (_has_decimal(gold) or _has_decimal(pred)):  # type: ignore[arg-type]
        scale = max(abs(g), abs(p))
        return None if gap == 0 or gap <= scale * EXACT_GAP else "exact values differ"
    written, other, text = (p, g, pred_text) if _has_decimal(pred) else (g, p, gold_text)  # type: ignore[arg-type]
    if written == 0 and other != 0:
        return "a written zero for a non-zero value"
    place = last_digit_place(text)
    if place is not None and gap > place / 2:
        return "differs beyond the digits written"
    return None
