"""Checks shared by every format: a dataset folder's ``MD5SUMS`` and the file-level errors.

A folder under the data root may carry an ``MD5SUMS`` file in ``md5sum``'s format (``<32 hex
digits>  <path relative to the folder>``, as ``../shared/data`` does). Every file a loader
reads from such a folder, and that the listing names, must match it: a mismatch means the
file was damaged or altered after the listing was made, so the dataset is refused (load) or
listed as unavailable (``dpaudit datasets``) rather than used. A file the listing does not
name is checked by its format only.

Digests are remembered in process per (path, size, mtime, ctime, inode): MD5 runs at about
600 MB/s here (MNIST's four ``.gz`` files, 11 MB, take under 20 ms), so no cache on disk is
kept; the in-process memo only spares ``dpaudit datasets`` hashing ``adult`` twice.

Every loader passes each file it reads through :func:`verify_checksum`, so the same call also
notes what was read: inside :func:`recording_reads`, the MD5 of every such file is collected
(the listing's digest, already checked, or the file's own when the listing does not name it).
That is a dataset's identity in the keys of stored records and results
(:func:`dpaudit.data.dataset_files`): replacing a file, even with its listing updated, makes
them be recomputed rather than reused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from dpaudit.data.source import DatasetFileError

__all__ = ["MD5SUMS", "checked_files", "file_md5", "md5_listing", "recording_reads", "size_of", "verify_checksum"]

MD5SUMS = "MD5SUMS"

# A listing is a few lines per file; anything far larger is not an MD5SUMS file.
_MAX_LISTING_BYTES = 4 * 2**20
_LINE = re.compile(r"^\\?([0-9a-fA-F]{32}) [ *](.+)$")

_StatKey = tuple[str, int, int, int, int]
_digests: dict[_StatKey, str] = {}
_listings: dict[_StatKey, dict[str, str]] = {}
# Open recordings (nested loads each get their own): path → MD5 of every file verified meanwhile.
_recordings: list[dict[str, str]] = []


@contextlib.contextmanager
def recording_reads() -> Iterator[dict[str, str]]:
    """Collects ``{absolute path: md5}`` of every file passed to :func:`verify_checksum` inside the block.

    Raises:
        DatasetFileError: a file read could not be hashed.
    """
    reads: dict[str, str] = {}
    _recordings.append(reads)
    try:
        yield reads
    finally:
        _recordings.remove(reads)


def _note_read(path: Path, digest: str | None) -> None:
    if not _recordings:
        return
    if digest is None:
        try:
            digest = file_md5(path)
        except OSError as exc:
            raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
    for reads in _recordings:
        reads[str(path)] = digest


def _stat_key(path: Path) -> _StatKey:
    st = path.stat()
    # ctime cannot be set by a user (unlike mtime), so a rewrite that restores the mtime is noticed.
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def file_md5(path: Path) -> str:
    """The MD5 hex digest of ``path`` (remembered per size, mtime, ctime and inode)."""
    key = _stat_key(path)
    if key not in _digests:
        digest = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        _digests[key] = digest.hexdigest()
    return _digests[key]


def _normalise(name: str) -> str:
    # md5sum writes paths as given on its command line: "./s1/1.pgm" and "s1/1.pgm" are one file.
    while name.startswith("./"):
        name = name[2:]
    return name


def md5_listing(folder: Path) -> dict[str, str] | None:
    """``{relative path: md5}`` from ``folder/MD5SUMS``, or ``None`` when the folder has none.

    Raises:
        DatasetFileError: the listing is unreadable, too large, or a line is not
            ``<md5> <space><space or *><path>``.
    """
    path = folder / MD5SUMS
    if not path.exists():
        return None
    try:
        key = _stat_key(path)
        if key in _listings:
            return _listings[key]
        if not path.is_file():
            raise DatasetFileError(path, "not a file (an MD5SUMS listing must be a text file)")
        if key[1] > _MAX_LISTING_BYTES:
            raise DatasetFileError(path, f"not an MD5SUMS listing: {key[1]} bytes, more than {_MAX_LISTING_BYTES}")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise DatasetFileError(path, "not an MD5SUMS listing: not UTF-8 text") from None
    except OSError as exc:
        raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
    listing: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line.rstrip("\r"))
        if match is None:
            raise DatasetFileError(path, f"not an MD5SUMS listing: line {number} is not '<md5>  <file>'")
        listing[_normalise(match.group(2))] = match.group(1).lower()
    _listings[key] = listing
    return listing


def verify_checksum(path: Path, folder: Path) -> bool:
    """Checks ``path`` against ``folder/MD5SUMS`` when the listing names it.

    Args:
        path: a file inside ``folder``.
        folder: the dataset folder that may hold ``MD5SUMS``.

    Returns:
        True if the file was checked (and matched), False if there is no listing or it does
        not name the file. Either way, inside :func:`recording_reads` the file's MD5 is noted.

    Raises:
        DatasetFileError: the digest differs from the listing's, or the listing is malformed.
    """
    listing = md5_listing(folder)
    if listing is None:
        _note_read(path, None)
        return False
    try:
        relative = path.relative_to(folder).as_posix()
    except ValueError:
        _note_read(path, None)
        return False
    expected = listing.get(_normalise(relative))
    if expected is None:
        _note_read(path, None)
        return False
    try:
        actual = file_md5(path)
    except OSError as exc:
        raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
    if actual != expected:
        raise DatasetFileError(
            path,
            f"altered or damaged: its MD5 is {actual}, {folder / MD5SUMS} lists "
            f"{expected} (restore the file or fix the listing)",
        )
    _note_read(path, actual)
    return True


def checked_files(count: int, checksums: int, what: str) -> str:
    """The ``checked`` line of an available dataset: ``what`` for ``count`` files, plus checksums."""
    text = f"{what} of {count} file{'s' if count != 1 else ''}"
    if checksums:
        text += f"; MD5 of {checksums} against MD5SUMS"
    return text


def size_of(path: Path) -> int:
    """``path``'s size in bytes, as a :class:`DatasetFileError` when it cannot be read."""
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
