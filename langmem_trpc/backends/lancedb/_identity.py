"""The recorded embedder of a LanceDB directory (`service/identity.py`).

A JSON file beside the table, `langmem_embedder.json`, written atomically
(temporary file, then rename). The directory lock makes the service the only
one on the directory, so the file is read once, at open.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...service.identity import NO_REEMBED_HINT, EmbedderIdentity, check_identity

FILE = "langmem_embedder.json"


def recorded(directory: str | Path) -> EmbedderIdentity | None:
    path = Path(directory) / FILE
    if not path.exists():
        return None
    return EmbedderIdentity.from_json(path.read_text(encoding="utf-8"))


def record(directory: str | Path, identity: EmbedderIdentity) -> None:
    path = Path(directory) / FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(identity.to_json(), encoding="utf-8")
    os.replace(temporary, path)


def adopt(
    directory: str | Path, current: EmbedderIdentity, stored_dims: int | None
) -> EmbedderIdentity:
    """The directory's identity checked against `current` (`ConfigurationError` naming both
    on a mismatch); a directory that records none records `current`, unless its table
    holds vectors of another width (`stored_dims`)."""
    where = f"at {directory}"
    stored = recorded(directory)
    if stored is None:
        if stored_dims is not None and stored_dims != current.dims:
            check_identity(
                EmbedderIdentity("an unrecorded embedder", stored_dims, ()), current, where
            )
        record(directory, current)
        return current
    return check_identity(stored, current, where, NO_REEMBED_HINT)
