"""Reading input files the same way everywhere (traces, scenarios, sweeps, run folders).

Text: UTF-8, with or without a byte-order mark; UTF-16/UTF-32 with a byte-order mark; anything
else (Latin-1, UTF-16 without a mark) is refused in one line naming the file. Compressed input
(gzip, zstd) is recognised by its magic bytes, whatever its name. `-` is standard input where a
caller allows it. YAML and JSON refuse duplicate keys, nesting deeper than MAX_DEPTH and integer
strings Python will not convert; every refusal is an InputError (file, line, field)."""

from __future__ import annotations

import codecs
import gzip
import io
import json
import math
import stat
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

import yaml

from netem.strict_yaml import StrictLoader  # one definition for scenarios, sweeps and link profiles
from pddbench.core.errors import InputError

MAX_DEPTH = 64  # nesting deeper than this is not a trace line or a scenario
GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def is_stdin(path: str | Path) -> bool:
    return str(path) == "-"


def check_readable(path: Path, what: str) -> None:
    """A missing file or a directory is refused in one line; devices and pipes are read."""
    if path.is_dir():
        raise InputError(str(path), f"is a directory, not a {what}")
    if not path.exists():
        raise InputError(str(path), f"no such {what}")
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise InputError(str(path), f"cannot be read ({exc.strerror})") from None
    if stat.S_ISSOCK(mode):
        raise InputError(str(path), f"is a socket, not a {what}")


def _raw_stream(path: Path, allow_stdin: bool, what: str) -> IO[bytes]:
    if is_stdin(path):
        if not allow_stdin:
            raise InputError("-", f"reading a {what} from standard input is not supported; pass a file")
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise InputError("-", f"standard input is closed; pass the {what} as a file or pipe it in")
        return sys.stdin.buffer
    check_readable(path, what)
    try:
        return path.open("rb")
    except OSError as exc:
        raise InputError(str(path), f"cannot be read ({exc.strerror})") from None


def _decompressed(raw: IO[bytes], path: Path) -> IO[bytes]:
    buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)  # type: ignore[arg-type]
    head = buffered.peek(4)[:4]
    if head.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[return-value]
    if head.startswith(ZSTD_MAGIC):
        try:
            import zstandard
        except ImportError:  # pragma: no cover - a dependency
            raise InputError(str(path), "is zstd-compressed and the zstandard module is missing: "
                             "pip install zstandard, or decompress it first") from None
        return zstandard.ZstdDecompressor().stream_reader(buffered, read_across_frames=True)  # type: ignore[return-value]
    return buffered


def _encoding(stream: IO[bytes], path: Path) -> str:
    head = stream.peek(4)[:4] if hasattr(stream, "peek") else b""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    if len(head) >= 2 and (head[0] == 0 or head[1] == 0):
        raise InputError(str(path), "looks like UTF-16 without a byte-order mark; save it as UTF-8")
    return "utf-8"


@contextmanager
def open_text(path: str | Path, what: str, allow_stdin: bool = False) -> Iterator[IO[str]]:
    """A text stream of `path` (decompressed, decoded); errors while reading become InputError."""
    path = Path(path)
    raw = _raw_stream(path, allow_stdin, what)
    try:
        data = _decompressed(raw, path)
        if not hasattr(data, "peek"):
            data = io.BufferedReader(data)  # type: ignore[arg-type]
        text = io.TextIOWrapper(data, encoding=_encoding(data, path), errors="strict", newline=None)  # type: ignore[arg-type]
        with _read_errors(path):
            yield text
    finally:
        if not is_stdin(path):
            raw.close()


@contextmanager
def _read_errors(path: Path) -> Iterator[None]:
    try:
        yield
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} cannot be decoded; "
                         "Latin-1 or another encoding?): save it as UTF-8") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(str(path), f"is a damaged or truncated compressed file ({exc})") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # zstandard.ZstdError and friends
        if type(exc).__module__.startswith("zstandard"):
            raise InputError(str(path), f"is a damaged zstd file ({exc})") from None
        raise


def read_text(path: str | Path, what: str) -> str:
    with open_text(path, what) as fh:
        return fh.read()


# -- JSON --------------------------------------------------------------------------------------

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key '{key}'")
        out[key] = value
    return out


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def loads_json(text: str | bytes, path: str, line: int | None = None) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity, bounded nesting and digit strings."""
    if _depth(text) > MAX_DEPTH:
        raise InputError(path, f"nests deeper than {MAX_DEPTH} levels", line)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"is not valid JSON ({exc.msg} at column {exc.colno})",
                         line if line is not None else exc.lineno) from None
    except (ValueError, RecursionError) as exc:  # duplicate key, too many digits, NaN
        raise InputError(path, f"is not acceptable JSON ({_short(exc)})", line) from None


def _depth(text: str | bytes) -> int:
    """Upper bound of bracket nesting (brackets inside strings count too: a bound, not a parse)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    depth = peak = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            peak = max(peak, depth)
        elif ch in "]}":
            depth -= 1
    return peak


def _short(exc: BaseException) -> str:
    msg = str(exc).split(";")[0].strip()
    return msg[:160] or type(exc).__name__


def read_json(path: str | Path, what: str) -> Any:
    path = Path(path)
    return loads_json(read_text(path, what), str(path))


# -- YAML --------------------------------------------------------------------------------------



def load_yaml(text: str, path: str) -> Any:
    """Strict YAML; an error names the file and line."""
    if _depth(text) > MAX_DEPTH:
        raise InputError(path, f"nests deeper than {MAX_DEPTH} levels")
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"is not valid YAML ({problem})", line=mark.line + 1 if mark else None) from None
    except (ValueError, RecursionError, OverflowError) as exc:  # e.g. a 5,000-digit integer
        raise InputError(path, f"is not acceptable YAML ({_short(exc)})") from None


def load_yaml_value(raw: str) -> Any:
    """A `--set` value in YAML syntax; text that is not YAML stays a string."""
    try:
        return load_yaml(raw, "--set")
    except InputError:
        return raw


def read_number_table(path: str | Path, what: str, label: str | None = None) -> list[dict]:
    """A CSV of numbers with a header row; a cell that is not a finite number is refused with
    file:line:field. `label`: one column kept as text (e.g. a state name)."""
    import csv

    path = Path(path)
    rows = []
    with open_text(path, what) as fh:
        for line, rec in enumerate(csv.DictReader(fh), start=2):
            rows.append({k: (v if k == label else _finite_cell(v, str(path), line, k)) for k, v in rec.items()})
    if not rows:
        raise InputError(str(path), "holds no rows")
    return rows


def _finite_cell(value: Any, path: str, line: int, field: Any) -> float:
    if not isinstance(field, str) or value is None:
        raise InputError(path, "has a row with another number of cells than the header", line)
    try:
        number = float(value)
    except ValueError:
        raise InputError(path, f"must be a number, got {value!r}", line, field) from None
    if not math.isfinite(number):
        raise InputError(path, f"must be a finite number, got {value!r}", line, field)
    return number


def why_not_number(value) -> str | None:
    """Why `value` is not a finite plain number (None when it is one, or null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            return "a number too large for a float"
        return None if math.isfinite(number) else f"not finite ({value!r})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, dict):
        return "a mapping (nested values), not a number"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"
