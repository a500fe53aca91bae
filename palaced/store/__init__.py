"""The replica's storage: synchronous apsw store (store.py) and its trio adapter (aio.py).

Import direction: palace_proto → palaced.store → everything else in palaced.
"""

from .store import DB_FILENAME as DB_FILENAME
from .store import Store as Store
from .store import StoreError as StoreError
from .store import WriteBatchResult as WriteBatchResult
from .store import WriteContext as WriteContext
