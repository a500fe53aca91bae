"""palace_proto: the pure protocol core shared by palaced and palacectl.

Layers (each imports only those above it): errors → ids → envelope (canonical encoding, signing)
→ validation (data-model rules) → framing (length-prefixed msgpack) → control (local API
messages) → apiconn (the local API's sans-IO connection, both ends). No trio, no apsw, no clock, no logging
setup: stdlib, msgpack and cryptography only.
The spec is PROTOCOL.md next to this file.
"""

from .control import PROTOCOL_VERSION as PROTOCOL_VERSION
from .errors import ApiError as ApiError
from .errors import NotFound as NotFound
from .errors import ProtocolError as ProtocolError
from .errors import ValidationError as ValidationError

__version__ = "0.1.0"
