"""How `leaderboard serve` runs the app: the shared serving layer's uvicorn settings
(kernelgym_gap.serving.protocol: header timeout, keep-alive, connection caps in all and per client, header
size), named here for the modules and tests that import them from web/."""
from __future__ import annotations

from kernelgym_gap.serving.protocol import (BODY_TIMEOUT_S, HEADER_TIMEOUT_S, KEEP_ALIVE_S, MAX_CONNECTIONS,
                                            MAX_HEADER_BYTES, MAX_PER_CLIENT, GuardedH11Protocol,
                                            guarded_protocol, serve, server_config)

__all__ = ["BODY_TIMEOUT_S", "HEADER_TIMEOUT_S", "KEEP_ALIVE_S", "MAX_CONNECTIONS", "MAX_HEADER_BYTES",
           "MAX_PER_CLIENT", "GuardedH11Protocol", "guarded_protocol", "serve", "server_config"]
