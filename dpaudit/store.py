"""The run store: atomic JSON/NPZ/weights writes and the run-directory layout.

Everything a run produces lands under one run directory::

    RUN_DIR/
      run.json               what created it, when, with which package versions
      records/<model_id>/    record.json + model.safetensors (one per trained model)
      attacks/               attack results (JSON + NPZ)
      audits/                audit results and their scores
      reports/               rendered HTML/Markdown and figures

Writes go to a temporary file in the same directory followed by ``os.replace``, so a crash
never leaves a half-written file under a final name and a rerun can tell what is finished.
Results are JSON + NPZ with a schema version; nothing is ever pickled.
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import time
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from dpaudit import _validate as v

__all__ = [
    "SCHEMA_VERSION",
    "RunDir",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "atomic_save_npz",
    "read_json",
    "load_npz",
    "temp_file_beside",
    "to_jsonable",
    "from_jsonable",
    "freeze",
    "thaw",
    "JsonValue",
    "JsonObject",
    "FrozenJson",
]

# What a stored JSON document holds, as a type: mypy then makes a reader narrow what it takes out of
# a document (``isinstance``) instead of trusting ``Any``. Values that have a fixed shape are frozen
# dataclasses serialised by the type-derived codec (dpaudit.specs); these two name the rest: the
# codec's own input and output, and free-form maps such as a spec's user-given options.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject = dict[str, JsonValue]
# The same data after :func:`freeze`, as immutable values hold it (a parameter map kept by a result):
# objects read-only mappings, arrays tuples.
FrozenJson = str | int | float | bool | None | tuple["FrozenJson", ...] | Mapping[str, "FrozenJson"]

SCHEMA_VERSION = 1
_SUBDIRS = ("records", "attacks", "audits", "certify", "compare", "reports")


def _read_umask() -> int:
    # os.umask can only be read by setting it; done once, at import, before any worker thread.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def temp_file_beside(path: Path) -> tuple[int, str]:
    """A temporary file next to ``path`` (same file system, so the final rename is atomic).

    ``mkstemp`` creates files 0600 whatever the umask; the file gets the mode an ordinary
    ``open`` would give it (0666 masked by the umask, 0644 under the usual 022), so results
    and reports are as readable as any other file the user writes.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)
    return fd, tmp


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Writes ``data`` to ``path`` atomically (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_file_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Writes UTF-8 ``text`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types for ``obj``; non-finite floats become the strings "inf", "-inf", "nan".

    Strict JSON has no infinity, yet a non-private claim's ε is ∞; a string keeps the file
    readable by every JSON parser, and :func:`from_jsonable` turns it back into a float.
    """
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(val) for k, val in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(obj, Path):
        return str(obj)
    return obj


def freeze(obj: Any) -> Any:
    """Deep read-only copy of JSON-like data for immutable result values.

    Mappings become ``MappingProxyType``, lists, tuples and arrays become tuples, NumPy
    scalars become Python scalars; :func:`thaw` turns it back into plain dicts and lists.
    """
    if isinstance(obj, Mapping):
        return MappingProxyType({str(k): freeze(x) for k, x in obj.items()})
    if isinstance(obj, (list, tuple)):
        return tuple(freeze(x) for x in obj)
    if isinstance(obj, np.ndarray):
        return tuple(freeze(x) for x in obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def thaw(obj: Any) -> Any:
    """Plain dicts and lists from :func:`freeze` output (for JSON)."""
    if isinstance(obj, Mapping):
        return {k: thaw(x) for k, x in obj.items()}
    if isinstance(obj, tuple):
        return [thaw(x) for x in obj]
    return obj


_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def from_jsonable(obj: Any) -> Any:
    """Inverse of :func:`to_jsonable` for the non-finite float strings."""
    if isinstance(obj, dict):
        return {k: from_jsonable(val) for k, val in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(x) for x in obj]
    if isinstance(obj, str) and obj in _NONFINITE:
        return _NONFINITE[obj]
    return obj


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Writes ``obj`` as strict JSON (see :func:`to_jsonable`) atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, sort_keys=False, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """Reads a JSON file written by :func:`atomic_write_json`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not valid JSON (names the path).
    """
    path = Path(path)
    try:
        return from_jsonable(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise v.invalid(str(path), f"{path} is not valid JSON (truncated or corrupt?): {exc}") from None
    except UnicodeDecodeError as exc:
        raise v.invalid(str(path), f"{path} is not valid JSON: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise v.invalid(str(path), f"{path} is not valid JSON: nested too deeply") from None
    except IsADirectoryError:
        raise v.invalid(str(path), f"{path} must be a JSON file, got a directory") from None


def save_value(value: Any, directory: str | os.PathLike[str], filename: str, *, kind: type[Any]) -> Path:
    """Writes a result value (``kind``, with ``to_dict``) as ``directory/filename`` atomically."""
    if not isinstance(value, kind):
        raise TypeError(f"result must be a {kind.__name__}, got {type(value).__name__}")
    return atomic_write_json(Path(directory) / filename, value.to_dict())


def load_value(path: str | os.PathLike[str], filename: str, *, kind: Any) -> Any:
    """Reads a value written by :func:`save_value` from its file or the directory holding ``filename``."""
    p = Path(path)
    if p.is_dir():
        p = p / filename
    return kind.from_dict(read_json(p))


def atomic_save_npz(path: str | os.PathLike[str], **arrays: np.ndarray) -> Path:
    """Saves arrays to a compressed NPZ atomically; object arrays are refused (they need pickle)."""
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise TypeError(f"array {name!r} has dtype object, which NPZ can only store by pickling")
    buf = io.BytesIO()
    # numpy's stub lets a ** mapping bind its allow_pickle: bool (a 2.x parameter); every value here is an array.
    np.savez_compressed(buf, **{k: np.asarray(a) for k, a in arrays.items()})  # type: ignore[arg-type]
    return atomic_write_bytes(path, buf.getvalue())


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Loads an NPZ file with ``allow_pickle=False``, every array read in full.

    Writes are atomic, so a damaged file means something outside the suite changed it (a
    copy cut short, a full disk on another tool's write, an edit); it is reported as such,
    naming the file, rather than as the archive library's own exception.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not a readable NPZ (truncated, corrupt, not a zip archive,
            or holding object arrays, which need pickle).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"run dir file {str(path)!r} not found")

    def corrupt(reason: str) -> ValueError:
        return ValueError(f"run dir file {str(path)!r} is corrupt ({reason}); delete it to recompute")

    try:
        data = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise corrupt(f"truncated or not a zip archive: {_first_line(exc)}") from None
    except (ValueError, OSError) as exc:  # neither zip nor .npy magic: numpy would need pickle to go on
        raise corrupt(f"not an NPZ archive: {type(exc).__name__}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise corrupt("a single .npy array, not an NPZ archive")
    try:
        with data:
            return {k: data[k] for k in data.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as exc:
        raise corrupt(f"truncated or damaged member: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0] or type(exc).__name__


# The directory under attacks/inversion/ that caches evaluators and priors (not a target).
_INVERSION_MODELS = "models"


class RunDir:
    """A run directory (see the module docstring for its layout).

    Args:
        path: the directory; created on :meth:`create`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not str(os.fspath(path)).strip():
            # Path("") is the current directory: an empty --out would turn it into a run directory.
            raise v.invalid("out", f"out must name a run directory, got {os.fspath(path)!r}")
        self.path = Path(path)

    def create(self, *, command: str = "") -> RunDir:
        """Creates the layout (idempotent) and writes ``run.json`` on first use."""
        if self.path.exists() and not self.path.is_dir():
            raise v.invalid("out", f"out must be a directory, got existing file {str(self.path)!r}")
        for sub in _SUBDIRS:
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        manifest = self.path / "run.json"
        if not manifest.exists():
            from dpaudit.provenance import provenance

            atomic_write_json(
                manifest,
                {
                    "schema_version": SCHEMA_VERSION,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "command": command,
                    "provenance": provenance(),
                },
            )
        return self

    def subdir(self, name: str) -> Path:
        """``records``, ``attacks``, ``audits``, ``certify`` or ``reports`` under the run."""
        if name not in _SUBDIRS:
            raise v.invalid("name", f"name must be one of {', '.join(_SUBDIRS)}; got {name!r}")
        return self.path / name

    def record_dir(self, model_id: str) -> Path:
        """Where the record of ``model_id`` lives."""
        return self.subdir("records") / model_id

    def submodel_dir(self, name: str) -> Path:
        """A cache of sub-models shared by the run's records (``records/NAME/``, e.g. PATE teachers).

        It holds no ``record.json`` itself, so :meth:`record_dirs` does not list it; each model in it
        is a record directory of its own (attackable with ``--target``).
        """
        return self.subdir("records") / safe_stem(name, default="models")

    def find_record_dir(self, model_id: str) -> Path | None:
        """The directory of the record ``model_id``, at the top of ``records/`` or in a sub-model cache.

        Sub-models are kept as ``records/CACHE/<model id>`` (PATE's teachers) or deeper under a
        name of their own (a DSSGD participant's ``records/CACHE/<federation>/participant-NNN``);
        those are found by the ``model_id`` their ``record.json`` states. ``None`` when absent.
        """
        root = self.subdir("records")
        for p in (self.record_dir(model_id), *root.glob(f"*/{model_id}")):
            if (p / "record.json").is_file():
                return p
        for f in sorted(root.glob("*/*/*/record.json")):
            try:
                if read_json(f).get("model_id") == model_id:
                    return f.parent
            except (OSError, ValueError):
                continue  # a damaged record elsewhere is not this lookup's business
        return None

    def record_dirs(self) -> list[Path]:
        """Every finished record (those whose record.json exists), sorted by name."""
        return self._children("records", "record.json")

    def audit_dir(self, name: str) -> Path:
        """Where the audit ``name`` keeps its trials, scores and result."""
        return self.subdir("audits") / safe_stem(name, default="audit")

    def audit_dirs(self) -> list[Path]:
        """Every finished audit (those whose result.json exists), sorted by name."""
        return self._children("audits", "result.json")

    def membership_dir(self, model_id: str) -> Path:
        """Where the membership-inference results against ``model_id`` live."""
        return self.subdir("attacks") / "membership" / safe_stem(model_id, default="target")

    def membership_dirs(self) -> list[Path]:
        """Every target with stored membership results, sorted by name."""
        root = self.subdir("attacks") / "membership"
        return sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.json"))) if root.is_dir() else []

    def inversion_dir(self, model_id: str) -> Path:
        """Where the model-inversion results against ``model_id`` live."""
        return self.subdir("attacks") / "inversion" / safe_stem(model_id, default="target")

    def inversion_dirs(self) -> list[Path]:
        """Every target with stored inversion results, sorted by name (the model cache excluded)."""
        root = self.subdir("attacks") / "inversion"
        return (
            sorted(
                p
                for p in root.iterdir()
                if p.is_dir() and p.name != _INVERSION_MODELS and any(p.glob("inversion-*.json"))
            )
            if root.is_dir()
            else []
        )

    def inversion_model_dir(self, key: str) -> Path:
        """A cached model an inversion attack trains once per run and reuses across targets.

        Evaluation classifiers and generative priors (GMI's GAN) live under
        ``attacks/inversion/models/KEY/``, keyed by what they were trained on and how.
        """
        return self.subdir("attacks") / "inversion" / _INVERSION_MODELS / safe_stem(key, default="model")

    def shadow_dir(self) -> Path:
        """The cache of shadow / reference models (shared by every attack of the run)."""
        return self.subdir("attacks") / "shadows"

    def certify_dir(self, model_id: str) -> Path:
        """Where the certificates and evasion results of ``model_id`` live."""
        return self.subdir("certify") / safe_stem(model_id, default="model")

    def compare_dir(self, name: str) -> Path:
        """Where the comparison ``name`` keeps its job outcomes and ``comparison.json``."""
        return self.subdir("compare") / safe_stem(name, default="compare")

    def compare_dirs(self) -> list[Path]:
        """Every stored comparison, sorted by name."""
        return self._children("compare", "comparison.json")

    def certify_dirs(self) -> list[Path]:
        """Every model with a stored certify summary, sorted by name."""
        return self._children("certify", "summary.json")

    def reports_dir(self) -> Path:
        """Where rendered reports (HTML, Markdown, figures, CSV) go."""
        return self.subdir("reports")

    def _children(self, sub: str, marker: str) -> list[Path]:
        root = self.subdir(sub)
        return sorted(p for p in root.iterdir() if (p / marker).is_file()) if root.is_dir() else []


def save_result_files(
    directory: str | os.PathLike[str], stem: str, *, arrays: dict[str, np.ndarray], meta: Mapping[str, object]
) -> Path:
    """Writes ``STEM.npz`` (the arrays) then ``STEM.json`` (the rest), both atomically.

    The JSON is written last and names its NPZ, so a JSON file that exists always has its
    arrays beside it. Every result type (membership, evasion, certification) is stored so.

    Returns:
        The path of the JSON file.
    """
    directory = Path(directory)
    atomic_save_npz(directory / f"{stem}.npz", **arrays)
    return atomic_write_json(directory / f"{stem}.json", {**meta, "arrays": f"{stem}.npz"})


def load_result_files(path: str | os.PathLike[str], array_names: tuple[str, ...]) -> dict[str, object]:
    """Reads what :func:`save_result_files` wrote: the JSON fields merged with the named arrays.

    Raises:
        FileNotFoundError: the JSON or its NPZ is missing.
        ValueError: the JSON is not an object, or names an NPZ outside its directory.
    """
    path = Path(path)
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise v.invalid(str(path), f"{path} must hold a JSON object, got {type(meta).__name__}")
    npz = path.parent / str(meta.get("arrays", f"{path.stem}.npz"))
    if npz.parent != path.parent:
        raise v.invalid(None, f"arrays must name a file beside {path}, got {meta.get('arrays')!r}")
    arrays = load_npz(npz)
    return {**meta, **{a: arrays[a] for a in array_names if a in arrays}}


def safe_stem(name: str, *, default: str) -> str:
    """``name`` as a file stem: characters other than letters, digits, ``-_.`` become ``_``; no leading dot."""
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")
    return stem or default
