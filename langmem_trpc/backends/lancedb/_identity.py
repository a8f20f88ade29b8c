"""The recorded embedder of a LanceDB directory (`service/identity.py`).

A JSON file beside the table, `langmem_embedder.json`, written atomically
(temporary file, then rename). The directory lock makes the service the only
one on the directory, so the file is read at open and by a re-embed. A re-embed
in progress records its target model in `langmem_reembed.json` the same way;
its cutover also writes the new identity into the `records` table's schema
metadata (`META_KEY`) in the same table version as the new vectors, so an open
after a crash between that version and the file finishes the move (`_reembed.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ...service.identity import EmbedderIdentity, check_identity

FILE = "langmem_embedder.json"
TARGET_FILE = "langmem_reembed.json"
META_KEY = b"langmem_embedder"


def _read(path: Path) -> EmbedderIdentity | None:
    if not path.exists():
        return None
    return EmbedderIdentity.from_json(path.read_text(encoding="utf-8"))


def _write(path: Path, identity: EmbedderIdentity) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(identity.to_json(), encoding="utf-8")
    os.replace(temporary, path)


def recorded(directory: str | Path) -> EmbedderIdentity | None:
    return _read(Path(directory) / FILE)


def record(directory: str | Path, identity: EmbedderIdentity) -> None:
    _write(Path(directory) / FILE, identity)


def target(directory: str | Path) -> EmbedderIdentity | None:
    """The model a re-embed in progress moves to (None: none in progress)."""
    return _read(Path(directory) / TARGET_FILE)


def record_target(directory: str | Path, identity: EmbedderIdentity | None) -> None:
    """Record (or, with None, forget) the model a re-embed moves to."""
    path = Path(directory) / TARGET_FILE
    if identity is None:
        path.unlink(missing_ok=True)
    else:
        _write(path, identity)


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
    return check_identity(stored, current, where)
