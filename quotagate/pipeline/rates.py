"""The chargeback's terms, without Spark (the CLI checks them before a JVM starts): the rates file
(TOML, top-level keys, every one required) and the periods a chargeback is cut into.

    currency = "EUR"
    price_per_gb_in = 0.05
    price_per_gb_out = 0.09
    price_per_request_second = 0.002
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields

from quotagate.config.settings import ConfigError, section_values
from quotagate.quotas import QuotaKey

PERIODS = ("day", "week", "month", "all")  # calendar periods in UTC (a week starts on Monday)
BYTES_PER_GB = 1e9  # decimal GB, as cloud providers bill
PRICE_MAX = 1e12  # per unit: any cost of int64 bytes or request-milliseconds stays finite


def _price(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= PRICE_MAX:
        raise ValueError(f"must be a finite number in 0..{PRICE_MAX:g}, got {value!r}")
    return float(value)


def _currency(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 16 or not value.isprintable():
        raise ValueError(f'must be a currency\'s name of at most 16 printable characters, e.g. "EUR", got {value!r}')
    return value


@dataclass(frozen=True)
class Rates:
    """The rates file (TOML, top-level keys): every key required."""

    currency: str = field(metadata={"doc": 'The currency the prices are in ("EUR", "USD" …).', "parse": _currency})
    price_per_gb_in: float = field(metadata={"doc": "Per GB (10^9 bytes) produced.", "parse": _price})
    price_per_gb_out: float = field(metadata={"doc": "Per GB (10^9 bytes) fetched.", "parse": _price})
    price_per_request_second: float = field(
        metadata={"doc": "Per second of request time (the broker's time answering).", "parse": _price}
    )


RATE_COLUMNS = [f.name for f in fields(Rates)]
# What is priced, by the quota key charging it (its usage column: whatif.AMOUNT_COLUMN): the cost
# column, the rate, and how many of the column's units (bytes, ms) the rate's unit is.
COSTS = {
    QuotaKey.PRODUCER_BYTE_RATE: ("cost_bytes_in", "price_per_gb_in", BYTES_PER_GB),
    QuotaKey.CONSUMER_BYTE_RATE: ("cost_bytes_out", "price_per_gb_out", BYTES_PER_GB),
    QuotaKey.REQUEST_PERCENTAGE: ("cost_request_time", "price_per_request_second", 1000.0),
}


def parse_rates(text: str) -> Rates:
    """The rates of a TOML text; a ConfigError naming the key otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("file", f"not valid TOML: {exc}") from exc
    return Rates(**section_values("", Rates, data))
