"""A Ray instance on this machine that listens on loopback only: for trying things out, tests and benchmarks.

Rules: the node's address is 127.0.0.1 and Ray's servers bind to it (Ray's single-machine mode, switched on
by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which also stops Ray looking up the machine's outward address);
no usage statistics are sent and no dashboard runs. The variables are set in this process's environment
before Ray starts, so the processes Ray starts inherit them. It knows nothing of generaldomo.
"""

from __future__ import annotations

import os
from typing import Any

import ray

__all__ = ["LOOPBACK_ENVIRONMENT", "start_local"]

LOOPBACK_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def start_local(num_cpus: int = 2, **options: Any) -> Any:
    """Start (``ray.init``) a single-node Ray on 127.0.0.1 with ``num_cpus``; ``options`` go to ``ray.init``
    (``resources``, ``runtime_env``, ...). Returns what ``ray.init`` returns. Stop it with ``ray.shutdown()``.

    Args:
        num_cpus: the CPUs the local Ray may use.
        options: what ``ray.init`` takes.

    Example::

        import generaldomo.ray as gdray

        gdray.start_local(num_cpus=2)
        ...
        ray.shutdown()
    """
    os.environ.update(LOOPBACK_ENVIRONMENT)
    settings: dict[str, Any] = {
        "num_cpus": num_cpus,
        "include_dashboard": False,
        "_node_ip_address": "127.0.0.1",
        "configure_logging": False,
        **options,
    }
    return ray.init(**settings)
