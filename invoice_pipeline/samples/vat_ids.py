"""Made-up VAT ids whose check digits pass: the pipeline refuses one that fails them
(domain/identity.py), so a sample seller with a random number would have no VAT id at all.

The generators draw their random digits as before (the same random stream, so every other drawn
value stays the same) and this module turns the drawn number into the nearest valid one by a
deterministic search: the last digit first, then the last two (GB), then the first two with the
last (FR: two check digits in front of a SIREN with a Luhn digit at its end), then the last
three and four (IT: an office code before the check digit).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

from stdnum import vatin

# Which digit positions of the national number are tried, in this order.
_SEARCHES: tuple[tuple[int, ...], ...] = ((-1,), (-2, -1), (0, 1, -1), (-3, -2, -1), (-4, -3, -2, -1))


def valid_vat_id(prefix: str, digits: str, *, lead: str = "", suffix: str = "") -> str:
    """`prefix + lead + digits + suffix` with `digits` changed as little as the search allows so
    that python-stdnum accepts the VAT id: valid_vat_id("DE", "123456789") -> "DE123456788"."""
    for candidate in _candidates(digits):
        vat_id = f"{prefix}{lead}{candidate}{suffix}"
        if vatin.is_valid(vat_id):
            return vat_id
    raise ValueError(f"no valid {prefix} VAT id near {prefix}{lead}{digits}{suffix}")


def _candidates(digits: str) -> Iterator[str]:
    yield digits
    for positions in _SEARCHES:
        for values in product("0123456789", repeat=len(positions)):
            chars = list(digits)
            for position, value in zip(positions, values, strict=True):
                chars[position] = value
            yield "".join(chars)
