"""Where a server in the driver listens, and the address the executors are told.

The narrowest address that works: with a local master (``local[*]``,
``local-cluster``) every executor runs on this machine, so loopback. Elsewhere
Spark's own settings: bind ``spark.driver.bindAddress`` when set (a container's
interface, say), advertise ``spark.driver.host``, as Spark's driver RPC does.
``parameterServerHost`` overrides both. (Servers hosted in executor tasks, the
shards and tree relays, bind their executor's own address.)
"""

from __future__ import annotations

import re
from typing import Tuple

LOOPBACK = "127.0.0.1"
_LOCAL = re.compile(r"^local(?:\[[^\]]*\])?$|^local-cluster\[")


def driver_endpoint(sc, configured: str = "") -> Tuple[str, str]:
    """``(bind address, advertised address)`` for a server in the driver process."""
    if configured:
        return configured, configured
    client_host = getattr(sc, "client_host", None)  # a Spark Connect client: this process
    if client_host is not None:  # (the server's conf speaks of the server's machine)
        return client_host, client_host
    if _LOCAL.match(getattr(sc, "master", "") or ""):
        return LOOPBACK, LOOPBACK
    conf = sc.getConf()
    advertise = conf.get("spark.driver.host", None) or LOOPBACK
    return conf.get("spark.driver.bindAddress", None) or advertise, advertise
