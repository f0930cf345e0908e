"""Dollars written for people: one rule for every place the CLI, the demo and the eval report print a cost.

Worker calls cost fractions of a cent, so fixed decimals print ``$0.00000`` and ``repr`` prints ``$1.09e-06``. A
cost under a dollar is written with two significant digits (``$0.0000011``, ``$0.00054``, ``$0.50``), a larger
one in cents (``$12.35``); files meant for machines (CSV, JSON) keep the full number.
"""

from __future__ import annotations

import math


def usd(amount: float) -> str:
    """``amount`` dollars as ``$0.0000011``, ``$0.012``, ``$3.40``; exactly zero is ``$0``."""
    if amount == 0 or not math.isfinite(amount):
        return "$0" if amount == 0 else f"${amount}"
    sign, amount = ("-" if amount < 0 else ""), abs(amount)
    rounded = float(f"{amount:.2g}")  # two significant digits, so 0.00099999 is 0.0010 and 0.999 a dollar
    if rounded >= 1:
        return f"{sign}${amount:,.2f}"
    return f"{sign}${rounded:.{max(2, 1 - math.floor(math.log10(rounded)))}f}"
