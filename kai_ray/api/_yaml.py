"""Multi-document YAML that keeps going after a broken document.

PyYAML stops a stream at its first syntax error, which would hide every later
object in the file. Splitting at `---` lines first lets one bad document be
reported (with its line) while the others still load.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class YamlDocument:
    """One parsed document; `line` is where its content starts (1-based)."""

    line: int
    data: Any


@dataclass(frozen=True)
class YamlSyntaxError:
    line: int
    message: str


def parse_documents(text: str) -> Iterator[YamlDocument | YamlSyntaxError]:
    """Yield every non-empty document of `text`, or the syntax error that spoiled it."""
    for offset, chunk in _split(text):
        parsed = _parse_one(chunk, offset)
        if parsed is not None:
            yield parsed


def _split(text: str) -> Iterator[tuple[int, str]]:
    """Cut at document markers, blanking the marker so column and line numbers stay true."""
    start, chunk = 0, list[str]()
    for number, line in enumerate(text.splitlines(keepends=True)):
        if _is_marker(line):
            yield start, "".join(chunk)
            start, chunk = number, ["   " + line[3:]]
        else:
            chunk.append(line)
    yield start, "".join(chunk)


def _is_marker(line: str) -> bool:
    return line.startswith("---") and (len(line) == 3 or line[3] in " \t\r\n")


def _parse_one(chunk: str, offset: int) -> YamlDocument | YamlSyntaxError | None:
    loader = yaml.SafeLoader(chunk)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        return YamlDocument(offset + node.start_mark.line + 1, loader.construct_document(node))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = offset + (mark.line + 1 if mark else 1)
        reason = ", ".join(part for part in (error.context, error.problem) if part)
        return YamlSyntaxError(line, f"invalid YAML: {reason}")
    except yaml.YAMLError as error:
        return YamlSyntaxError(offset + 1, f"invalid YAML: {error}")
    finally:
        loader.dispose()
