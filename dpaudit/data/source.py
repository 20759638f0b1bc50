"""What a dataset source is, where its files live, and how a missing file is reported.

A *source* (:class:`DatasetSource`) is one registered dataset format: its name, what it is,
the shape of one sample, its number of classes, the files it needs under the data root, and
the functions that load it, describe it without loading it, and (optionally) download it.
:mod:`dpaudit.data.registry` keeps one entry per source; nothing else dispatches on names.

The data root is ``--data-root`` / ``$DPAUDIT_DATA_ROOT`` / ``~/.dpaudit/data`` (docs/architecture.md,
"Data root"); nothing here touches the network.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpaudit import _validate as v

if TYPE_CHECKING:
    from dpaudit.data.containers import DatasetBundle

__all__ = [
    "CACHE_ENV",
    "DATA_ROOT_ENV",
    "DataRootError",
    "DatasetFileError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetSource",
    "cache_dir",
    "checked_data_root",
    "info_from_bundle",
    "missing_info",
    "not_found",
    "resolve_data_root",
    "unusable_info",
]

DATA_ROOT_ENV = "DPAUDIT_DATA_ROOT"
CACHE_ENV = "DPAUDIT_CACHE"

_DEFAULT_DATA_ROOT = Path("~/.dpaudit/data")


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not under the data root (and were not, or could not be, downloaded)."""


class DatasetFileError(v.InvalidArgument):
    """A dataset file is present but unusable: truncated, corrupt, altered, or not in its format.

    A ``ValueError`` (the command line exits 2 on it), with a one-line message that starts with
    the file: ``"<path> is <reason>"``, e.g. ``".../train-images-idx3-ubyte.gz is truncated:
    expected 47040016 bytes after decompression, got 1000"``.

    Attributes:
        path: the offending file.
        reason: what is wrong with it, one line, phrased to follow "is".
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = Path(path)
        # Library messages (zlib, numpy, pandas) may span lines; the contract is one line.
        self.reason = " ".join(str(reason).split())
        super().__init__(f"{self.path} is {self.reason}", argument="data_root")


class DataRootError(v.InvalidArgument):
    """The data root itself is unusable: missing (when named explicitly), not a directory, unreadable."""

    argument = "data_root"


# ----------------------------------------------------------------------------- paths


def _as_path(name: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise v.invalid_type(name, f"{name} must be a path (str or os.PathLike), got {value!r}")
    text = os.fspath(value)
    if isinstance(text, bytes):
        raise v.invalid_type(name, f"{name} must be a text path, got {value!r}")
    if not text.strip():
        raise v.invalid(name, f"{name} must be a non-empty path, got {value!r}")
    return Path(os.path.abspath(os.path.expanduser(text)))


def resolve_data_root(data_root: str | os.PathLike[str] | None = None) -> Path:
    """The data root to read datasets from.

    Args:
        data_root: an explicit root; wins over the environment.

    Returns:
        ``data_root`` if given, else ``$DPAUDIT_DATA_ROOT`` if set and non-empty, else
        ``~/.dpaudit/data`` — as an absolute path (the directory need not exist).

    Raises:
        TypeError: ``data_root`` is not a path.
        ValueError: ``data_root`` is an empty string.
    """
    return _root_and_origin(data_root)[0]


def _root_and_origin(data_root: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The resolved data root and how to name where it came from in an error message."""
    if data_root is not None:
        return _as_path("data_root", data_root), "--data-root"
    env = os.environ.get(DATA_ROOT_ENV, "").strip()
    if env:
        return _as_path(DATA_ROOT_ENV, env), DATA_ROOT_ENV
    return _as_path("data_root", _DEFAULT_DATA_ROOT), "the default data root"


def checked_data_root(data_root: str | os.PathLike[str] | None = None, *, allow_missing: bool = False) -> Path:
    """:func:`resolve_data_root`, refusing a root that cannot be a data root.

    A root named explicitly (``--data-root`` / ``data_root`` or ``$DPAUDIT_DATA_ROOT``) must
    exist: a typo there would otherwise read as "dataset not found" for every dataset. The
    default ``~/.dpaudit/data`` may be absent (a fresh install), which reads as empty. Any root
    that exists must be a readable directory.

    Args:
        data_root: as for :func:`resolve_data_root`.
        allow_missing: accept an explicit root that does not exist yet (a download creates it).

    Returns:
        The root, as :func:`resolve_data_root` gives it.

    Raises:
        TypeError: ``data_root`` is not a path.
        DataRootError: (a ``ValueError``) the root does not exist, is not a directory or cannot
            be read; the message names the option or variable it came from and the path.
    """
    root, origin = _root_and_origin(data_root)
    # The form the command line's other path checks use: --data-root='/x' does not exist.
    label = f"{origin} {str(root)!r}" if origin.startswith("the ") else f"{origin}={str(root)!r}"
    try:
        st = root.stat()
    except FileNotFoundError:
        if allow_missing or origin == "the default data root":
            return root
        raise DataRootError(f"{label} does not exist") from None
    except NotADirectoryError:
        raise DataRootError(f"{label} is not a directory (a component of the path is a file)") from None
    except PermissionError:
        raise DataRootError(f"{label} cannot be read: permission denied") from None
    except OSError as exc:
        raise DataRootError(f"{label} cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise DataRootError(f"{label} is not a directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise DataRootError(f"{label} cannot be read: permission denied")
    return root


def cache_dir() -> Path:
    """Where decompressed copies go: ``$DPAUDIT_CACHE``, else ``$XDG_CACHE_HOME/dpaudit``, else ``~/.cache/dpaudit``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return _as_path(CACHE_ENV, env)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg else Path("~/.cache")
    return _as_path(CACHE_ENV, base / "dpaudit")


def not_found(name: str, root: Path, expected: str, *, download: bool = False) -> DatasetNotFoundError:
    msg = f"dataset {name!r} not found under data root {root}: expected {expected}"
    msg += f"; set {DATA_ROOT_ENV} or pass --data-root"
    if download:
        msg += " (download=True was given)"
    return DatasetNotFoundError(msg)


@dataclass(frozen=True, kw_only=True)
class DatasetInfo:
    """What :func:`dataset_info` found for one dataset.

    Attributes:
        name: one of :data:`DATASETS`.
        available: whether :func:`load_dataset` would find the files.
        num_train: training samples (None if unavailable).
        num_test: test samples (None if unavailable).
        input_shape: shape of one sample (None if unavailable).
        num_classes: number of classes (None if unavailable).
        detail: the path found, or why the dataset is unavailable (``"unavailable: <file>:
            <reason>"`` when a file is present but unusable).
        checked: what was verified before calling the dataset available (e.g. headers, sizes,
            MD5SUMS checksums); empty when unavailable.
        problem_file: the unusable file, when that is why the dataset is unavailable.
    """

    name: str
    available: bool
    num_train: int | None
    num_test: int | None
    input_shape: tuple[int, ...] | None
    num_classes: int | None
    detail: str
    checked: str = ""
    problem_file: str | None = None


def unusable_info(name: str, err: DatasetFileError) -> DatasetInfo:
    """The entry of a dataset whose file ``err.path`` is present but unusable."""
    return DatasetInfo(
        name=name,
        available=False,
        num_train=None,
        num_test=None,
        input_shape=None,
        num_classes=None,
        detail=f"unavailable: {err.path}: {err.reason}",
        problem_file=str(err.path),
    )


def missing_info(name: str, why: str) -> DatasetInfo:
    return DatasetInfo(
        name=name, available=False, num_train=None, num_test=None, input_shape=None, num_classes=None, detail=why
    )


def info_from_bundle(bundle: DatasetBundle, detail: str, checked: str = "") -> DatasetInfo:
    return DatasetInfo(
        name=bundle.name,
        available=True,
        num_train=len(bundle.train),
        num_test=len(bundle.test),
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        detail=detail,
        checked=checked,
    )


@dataclass(frozen=True, kw_only=True)
class DatasetSource:
    """One registered dataset format: everything the loader, the CLI and ``dpaudit datasets`` need.

    Attributes:
        name: the registry key and ``--dataset`` value (lower case, ``-`` between words).
        description: one line on what the data is and whom to cite.
        input_shape: shape of one sample (``(C, H, W)`` for images, ``(d,)`` for tables;
            ``None`` when it depends on the files found, e.g. one-hot widths).
        num_classes: number of classes.
        files: the files it needs, relative to the data root (empty for bundled data); shown
            to the user, the loader itself checks every file it reads.
        load: ``load(root) -> DatasetBundle``; raises :class:`DatasetNotFoundError` naming the
            dataset, the root and the expected path when files are missing, and
            :class:`DatasetFileError` naming the file when one is present but unusable.
        info: ``info(root) -> DatasetInfo``, cheap where the format allows, and checking what
            the load would check (so "available" is verified); never raises for a missing
            dataset or an unusable file (it reports ``available=False`` and why).
        download: ``download(root)`` fetching the files into ``root`` (needs network), or
            ``None`` when dpaudit cannot download this dataset.
        needs_root: ``False`` for data bundled with a library (the data root is ignored).

    Raises:
        TypeError: a field has the wrong type.
        ValueError: the name is empty or not in canonical form.
    """

    name: str
    description: str
    input_shape: tuple[int, ...] | None
    num_classes: int
    files: tuple[str, ...]
    load: Callable[[Path], DatasetBundle]
    info: Callable[[Path], DatasetInfo]
    download: Callable[[Path], None] | None = None
    needs_root: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise v.invalid_type("name", f"name must be a non-empty string, got {self.name!r}")
        if self.name != self.name.strip().lower().replace("_", "-"):
            raise v.invalid("name", f"name must be lower case with '-' between words, got {self.name!r}")
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise v.invalid("num_classes", f"num_classes must be a positive integer, got {self.num_classes!r}")
        if self.input_shape is not None:
            object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))
        object.__setattr__(self, "files", tuple(str(f) for f in self.files))
        for field_name in ("load", "info"):
            if not callable(getattr(self, field_name)):
                raise TypeError(f"{field_name} must be callable, got {getattr(self, field_name)!r}")
        if self.download is not None and not callable(self.download):
            raise v.invalid_type("download", f"download must be callable or None, got {self.download!r}")

    def expected_paths(self, root: Path) -> tuple[Path, ...]:
        """The files this source needs under ``root``, as absolute paths."""
        return tuple(root / f for f in self.files)
