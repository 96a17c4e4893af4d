"""Whether our channels are encrypted: as Spark's own RPC is.

Every parameter-server channel (driver server, shards, tree relays, the torch
progress channel) is authenticated: the per-fit secret travels to the tasks
in their closure, over Spark's RPC, and every frame carries a tag under a
session key derived from it (:mod:`gradspark.rpc.wire`). Frames carry weights
and gradients, data at least as sensitive as Spark's own block transfers, so
they are encrypted exactly when Spark encrypts its RPC:

* ``spark.network.crypto.enabled`` (AES, with ``spark.authenticate``);
* ``spark.authenticate.enableSaslEncryption`` (the older SASL encryption);
* ``spark.ssl.rpc.enabled``, or ``spark.ssl.enabled`` (the RPC's SSL settings
  inherit from it).

``spark.gradspark.network.crypto.enabled`` (``true``/``false``) overrides
that, in either direction. When a channel on a non-loopback address is not
encrypted, one WARNING per process says so.

What this does not cover: when Spark's RPC is in clear, so is the task closure,
and the secret with it (a stranger who reads Spark's traffic can also speak to
our servers; encrypt Spark's RPC). ``torch.distributed`` (the TorchEstimator's
rendezvous store and gloo/NCCL traffic) has no authentication or encryption of
its own; we bind its store to the task's own address, and it must run on a
trusted network (docs/security.md).
"""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger(__name__)

OVERRIDE = "spark.gradspark.network.crypto.enabled"
SPARK_ENCRYPTION = ("spark.network.crypto.enabled", "spark.authenticate.enableSaslEncryption",
                    "spark.ssl.rpc.enabled", "spark.ssl.enabled")

_warned = threading.Event()


def _conf_get(sc, key: str):
    spark = getattr(sc, "spark", None)  # a Spark Connect client's context
    if spark is not None:
        return spark.conf.get(key, None)
    # The context's own conf: getConf() copies every entry through py4j, one call each
    # (40 ms a fit for the three keys read here).
    return sc._conf.get(key, None)


def _true(value) -> bool:
    return str(value).strip().lower() == "true"


def spark_encrypts(sc) -> bool:
    """Whether channels of a fit on ``sc`` (a SparkContext or a Connect client's
    context) are encrypted: Spark's RPC settings, unless the override is set."""
    override = _conf_get(sc, OVERRIDE)
    if override is not None:
        if str(override).strip().lower() not in ("true", "false"):
            raise ValueError(f"{OVERRIDE} must be true or false, got {override!r}")
        return _true(override)
    return any(_true(_conf_get(sc, key)) for key in SPARK_ENCRYPTION)


def warn_if_plaintext(host: str) -> None:
    """Once per process: a server on a network address sends frames unencrypted."""
    if host.startswith("127.") or host in ("localhost", "::1") or _warned.is_set():
        return
    _warned.set()
    logger.warning(
        "gradspark's parameter-server channel on %s is authenticated but not encrypted "
        "(weights and gradients cross the network in clear), because Spark's RPC is not "
        "encrypted either; set spark.network.crypto.enabled=true with "
        "spark.authenticate=true (or %s=true) to encrypt both", host, OVERRIDE)
