"""The fuzzer's hypothesis settings: a short reproducible run in ``tox`` and a long one in ``tox -e fuzz``.

Profile ``ci`` (the default) is derandomized, so that every CI run tries the same cases and a failure there is a
failure of the change under test, and keeps no example database; profile ``fuzz`` (``GENERALDOMO_FUZZ=fuzz``,
which ``tox -e fuzz`` sets) draws new cases each run, many more of them, and keeps the failing ones in the
example database (``.hypothesis/``) so that the next run tries them first. Each fuzz test says how many cases
it runs under ``ci``; ``fuzz`` multiplies that by :data:`SCALE` (the live ones by :data:`LIVE_SCALE`). Neither
has a deadline: the CI machine is loaded, and time per case is the benchmarks' business. ``ci`` does not shrink
a failing case (each attempt replays a whole scene, its drain and its wait for every expiry: minutes): it
reports the case as found, with the blob that reproduces it (``@reproduce_failure``); ``fuzz`` shrinks it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)

settings.register_profile(
    "ci", deadline=None, derandomize=True, database=None, print_blob=True, phases=_NO_SHRINK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)  # fmt: skip
settings.register_profile(
    "fuzz", deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)  # fmt: skip
PROFILE = os.environ.get("GENERALDOMO_FUZZ", "ci")
SCALE = {"ci": 1, "fuzz": 20}[PROFILE]
LIVE_SCALE = {"ci": 1, "fuzz": 4}[PROFILE]


def fuzz_settings(examples: int, steps: int | None = None, live: bool = False) -> settings:
    """Settings of a fuzz test that runs ``examples`` cases under ``ci`` (and :data:`SCALE` times as many under
    ``fuzz``), stateful ones ``steps`` steps each; ``live``: its cases share one live broker or peer (a
    function-scoped fixture, on purpose: each case is a batch more to the same one), and each is real IO, so
    ``fuzz`` runs :data:`LIVE_SCALE` times as many."""
    extra: dict[str, object] = {} if steps is None else {"stateful_step_count": steps}
    if live:
        extra["suppress_health_check"] = [*settings.get_profile(PROFILE).suppress_health_check,
                                          HealthCheck.function_scoped_fixture]  # fmt: skip
    scale = LIVE_SCALE if live else SCALE
    return settings(settings.get_profile(PROFILE), max_examples=examples * scale, **extra)  # type: ignore[arg-type]
