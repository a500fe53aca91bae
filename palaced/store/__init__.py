"""The replica's storage: the synchronous apsw store (``store.Store``, the owner of the small state
objects one module per responsibility works on — see store.py) and its trio adapter (aio.py).

Import direction: palace_proto → palaced.store → everything else in palaced.
"""

from .store import DB_FILENAME as DB_FILENAME
from .store import Store as Store
from .store import StoreError as StoreError
from .store import WriteBatchResult as WriteBatchResult
from .store import WriteContext as WriteContext
