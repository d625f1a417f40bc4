"""Retry policies: which answers of a service's workers are tried again, how often, and after what wait.

Rules: a worker's final answer is retried when it is a ``503`` marked for a retry (a handler's
``Reject(503, reason, retry=True)``: :func:`~generaldomo.sansio.wire.inner_frames.marked_retry`), or when the
service's policy names its status (``statuses``: codes from 500 to 599; none by default), and the task has been
retried fewer than ``retries`` times. The wait before retry *n* (1, 2, ...) is ``min * 2 ** (n - 1)`` seconds, at
most ``max``, with jitter: drawn uniformly between half of it and all of it, so that tasks that failed together do
not come back together. A service without a policy retries marked answers by :data:`DEFAULT`; ``retries=0`` turns
retrying off, marked answers included. Keeping a retry within its request's deadline is the broker core's business,
not this module's.

The forms of a policy: the record :class:`RetryPolicy`; its JSON form (``mmi.flow``'s key ``retry``, the flow
report, the configuration file), ``{"retries": 3, "backoff": {"min": 0.1, "max": 10}, "statuses": [500, 503]}``,
each key optional; and its text form (``generaldomo flow --retry``, ``--flow``), ``retries=3/backoff=0.1..10/
statuses=500+503``, each pair optional, a bare number standing for ``retries=N``. Every number is checked against
its field of :mod:`generaldomo.sansio.wire.limits` (``RETRIES``, ``RETRY_DELAY``, ``RETRY_STATUS``). It reads no
clock and no random source (the jitter's draw is given) and knows nothing of tasks, workers or messages.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from generaldomo.sansio.checked import check_fields, checked, checked_record
from generaldomo.sansio.wire.events import Frame
from generaldomo.sansio.wire.inner_frames import marked_retry
from generaldomo.sansio.wire.limits import RETRIES, RETRY_DELAY, RETRY_STATUS, Field

__all__ = ["DEFAULT", "REPORT_SCHEMA", "RetryPolicy", "retry_text"]

_KEYS = ("retries", "backoff", "statuses")
_EXAMPLE = "retries=3/backoff=0.1..10/statuses=500+503"


def _number(field: Field, value: object, whole: bool) -> float:
    """``value`` if it is a finite number within ``field``'s bounds (a whole one if ``whole``), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value % 1):
        raise ValueError(f"a {field.what} is a number ({field.bounds}), not {value!r:.40}")
    if (whole and value % 1) or not field.admits(value):
        what = "a whole number" if whole else "a number"
        raise ValueError(f"a {field.what} is {what} ({field.bounds}), not {value!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A service's retry policy (see the module docstring): ``retries`` after the first attempt, the backoff's
    first wait ``min`` and longest ``max`` (seconds), and the ``statuses`` retried without a mark. ValueError on
    a bad value, so a RetryPolicy that exists is valid.

    Example:
        >>> policy = RetryPolicy.of(retry_text("retries=2/backoff=0.5..4/statuses=500"))
        >>> policy.retried(b"500", [b"boom"], retried=1), policy.retried(b"500", [b"boom"], retried=2)
        (True, False)
        >>> [policy.wait(n, draw=1.0) for n in (1, 2, 3, 4)]
        [0.5, 1.0, 2.0, 4.0]
    """

    retries: int = checked(lambda name, value: int(_number(RETRIES, value, whole=True)), default=3)
    min: float = checked(lambda name, value: float(_number(RETRY_DELAY, value, whole=False)), default=0.1)
    max: float = checked(lambda name, value: float(_number(RETRY_DELAY, value, whole=False)), default=10.0)
    statuses: tuple[int, ...] = checked(
        lambda name, value: tuple(int(_number(RETRY_STATUS, s, whole=True)) for s in value), default=()
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if self.min > self.max:
            raise ValueError(f"the retry backoff's min ({self.min}) must not exceed its max ({self.max})")
        if len(set(self.statuses)) != len(self.statuses):
            raise ValueError(f"retry statuses are named once each, not {list(self.statuses)}")

    def retried(self, status: bytes, body: Sequence[Frame], retried: int) -> bool:
        """True when a task retried ``retried`` times so far, answered ``status`` with ``body``, is tried again."""
        if retried >= self.retries:
            return False
        return marked_retry(status, body) or (status.isdigit() and int(status) in self.statuses)

    def wait(self, retry: int, draw: float) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first), with ``draw`` (from 0 to 1) placing it
        between half the backoff and all of it."""
        backoff = min(self.max, self.min * 2.0 ** min(retry - 1, 64))
        return backoff * (0.5 + 0.5 * draw)

    def as_json(self) -> dict[str, Any]:
        """Its JSON form."""
        return {"retries": self.retries, "backoff": {"min": self.min, "max": self.max}, "statuses": list(self.statuses)}

    def text(self) -> str:
        """Its text form (what :func:`retry_text` reads)."""
        statuses = "+".join(map(str, self.statuses))
        text = f"retries={self.retries}/backoff={self.min:g}..{self.max:g}"
        return text + (f"/statuses={statuses}" if statuses else "")

    @classmethod
    def of(cls, value: object) -> RetryPolicy | None:
        """A policy from its JSON form (missing keys take their defaults), or None (null: the defaults,
        :data:`DEFAULT`); ValueError saying what is wrong."""
        if value is None or isinstance(value, RetryPolicy):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"retry must be a JSON object like {_JSON_EXAMPLE}, or null for the defaults")
        unknown = set(value) - set(_KEYS)
        if unknown:
            raise ValueError(f"unknown retry keys {sorted(unknown)}; known: {', '.join(_KEYS)}")
        found: dict[str, Any] = {}
        if "retries" in value:
            found["retries"] = value["retries"]
        backoff = value.get("backoff")
        if backoff is not None:
            if not isinstance(backoff, Mapping) or not set(backoff) <= {"min", "max"}:
                shown = '{"min": 0.1, "max": 10}'
                raise ValueError(f"the retry backoff is a JSON object like {shown}, not {backoff!r:.60}")
            found |= {key: backoff[key] for key in ("min", "max") if key in backoff}
        statuses = value.get("statuses")
        if statuses is not None:
            if not isinstance(statuses, Sequence) or isinstance(statuses, str) or len(statuses) > _MAX_STATUSES:
                raise ValueError(f"retry statuses are a list of at most {_MAX_STATUSES} codes from 500 to 599")
            found["statuses"] = tuple(statuses)
        if "min" in found and "max" not in found:
            found["max"] = max(DEFAULT.max, found["min"]) if isinstance(found["min"], int | float) else DEFAULT.max
        return checked_record(cls, found)  # (converted before the record is made)


_MAX_STATUSES: Final = RETRY_STATUS.high - RETRY_STATUS.low + 1
_JSON_EXAMPLE = '{"retries": 3, "backoff": {"min": 0.1, "max": 10}, "statuses": [500, 503]}'
DEFAULT: Final = RetryPolicy()  # what a service without a policy does with an answer marked for a retry


def retry_text(text: str) -> dict[str, Any]:
    """The JSON form of a policy's text form (``retries=3/backoff=0.1..10/statuses=500+503``, or a bare number of
    retries), checked; ValueError saying what is wrong."""
    text = text.strip()
    if text.isdigit() and len(text) <= 3:
        found: dict[str, Any] = {"retries": int(text)}
    else:
        found = {}
        for pair in text.split("/"):
            key, sep, value = pair.strip().partition("=")
            try:
                if not sep or key not in _KEYS or key in found:
                    raise ValueError
                if key == "retries":
                    found[key] = int(value)
                elif key == "backoff":
                    low, dots, high = value.partition("..")
                    if not dots:
                        raise ValueError
                    found[key] = {"min": float(low), **({"max": float(high)} if high else {})}
                else:
                    found[key] = [int(code) for code in value.split("+")] if value else []
            except ValueError:
                wanted = f"a retry policy is like {_EXAMPLE} (each part optional) or auto"
                raise ValueError(f"{wanted}, not {text!r:.80}") from None
    policy = RetryPolicy.of(found)
    assert policy is not None
    return found


REPORT_SCHEMA: Final[Mapping[str, Any]] = {
    "type": ["object", "null"],
    "required": ["retries", "backoff", "statuses"],
    "properties": {
        "retries": {"type": "integer", "minimum": RETRIES.low, "maximum": RETRIES.high},
        "backoff": {
            "type": "object",
            "required": ["min", "max"],
            "properties": {
                "min": {"type": "number", "exclusiveMinimum": RETRY_DELAY.low, "maximum": RETRY_DELAY.high},
                "max": {"type": "number", "exclusiveMinimum": RETRY_DELAY.low, "maximum": RETRY_DELAY.high},
            },
        },
        "statuses": {
            "type": "array",
            "items": {"type": "integer", "minimum": RETRY_STATUS.low, "maximum": RETRY_STATUS.high},
        },
    },
}
