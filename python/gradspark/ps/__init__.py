"""Driver-hosted parameter server: wire format, SSP clock, server and worker client."""

from gradspark.ps.client import ParameterClient, Weights
from gradspark.ps.clock import StalenessClock
from gradspark.ps.server import ParameterServer, running_servers
from gradspark.ps.wire import ProtocolError

__all__ = [
    "ParameterClient", "Weights", "StalenessClock", "ParameterServer", "running_servers",
    "ProtocolError",
]
