"""Authenticated RPC between the driver and tasks: wire format, server and client."""

from gradspark.rpc.client import ParameterClient, Weights
from gradspark.rpc.server import ParameterServer, running_servers
from gradspark.rpc.wire import ProtocolError

__all__ = [
    "ParameterClient", "Weights", "ParameterServer", "running_servers",
    "ProtocolError",
]
