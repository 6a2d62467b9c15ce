"""Made-up VAT ids whose check digits pass: the pipeline refuses one that fails them
(domain/identity.py), so a sample seller with a random number would have no VAT id at all.

The generators draw their random digits as before (the same random stream, so every other drawn
value stays the same) and this module turns the drawn number into the nearest valid one by a
deterministic search: the last digit first, then the last two (GB), then the first two with the
last, then the last three and four. FR and IT are computed directly (`_fast_path`).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

from stdnum import luhn, vatin

# Which digit positions of the national number are tried, in this order.
_SEARCHES: tuple[tuple[int, ...], ...] = ((-1,), (-2, -1), (0, 1, -1), (-3, -2, -1), (-4, -3, -2, -1))


def valid_vat_id(prefix: str, digits: str, *, lead: str = "", suffix: str = "") -> str:
    """`prefix + lead + digits + suffix` with `digits` changed as little as the search allows so
    that python-stdnum accepts the VAT id: valid_vat_id("DE", "123456789") -> "DE123456788"."""
    digits = _fast_path(prefix, digits)
    for candidate in _candidates(digits):
        vat_id = f"{prefix}{lead}{candidate}{suffix}"
        if vatin.is_valid(vat_id):
            return vat_id
    raise ValueError(f"no valid {prefix} VAT id near {prefix}{lead}{digits}{suffix}")


def _fast_path(prefix: str, digits: str) -> str:
    """FR and IT computed, not searched (the search takes hundreds of tries for them): FR is
    two check digits over a SIREN whose last digit is a Luhn digit; IT is seven digits, a
    province office code (001-100) and a Luhn digit."""
    if prefix == "FR" and len(digits) == 11 and digits.isdigit():
        siren = digits[2:10] + luhn.calc_check_digit(digits[2:10])
        return f"{(12 + 3 * (int(siren) % 97)) % 97:02d}{siren}"
    if prefix == "IT" and len(digits) == 11 and digits.isdigit():
        body = digits[:7] + f"{int(digits[7:10]) % 100 + 1:03d}"
        return body + luhn.calc_check_digit(body)
    return digits


def _candidates(digits: str) -> Iterator[str]:
    yield digits
    for positions in _SEARCHES:
        for values in product("0123456789", repeat=len(positions)):
            chars = list(digits)
            for position, value in zip(positions, values, strict=True):
                chars[position] = value
            yield "".join(chars)
