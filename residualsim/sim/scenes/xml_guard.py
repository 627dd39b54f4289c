"""Parse a user's XML file (URDF, COLLADA mesh) without expanding entities it declares.

A file that declares an XML entity (``<!ENTITY ...>`` in its ``<!DOCTYPE>``) can make a parser
expand it exponentially (the "billion laughs": ten nested entities of ten references each are
1e9 copies of a string from under a kilobyte) or quadratically (one long entity referenced
many times). The expat bundled with Python 3.11 stops both after 8 MiB of expansion at a
hundredfold amplification, an older expat does not; PyBullet's own XML reader (TinyXML)
expands no declared entity. URDF and COLLADA files need none, so :func:`parse_xml` refuses any
declaration before parsing, naming the file: a check of the prolog only (entities are declared
before the root element), stopped at the root element's start.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
import xml.parsers.expat as expat
from pathlib import Path

from residualsim.errors import SceneError

__all__ = ["parse_xml"]

#: Bytes read at a time while looking for entity declarations.
_CHUNK = 1 << 16


class _RootReached(Exception):
    """The root element started: the prolog, where entities are declared, is over."""


def _declares_entity(path: Path) -> bool:
    """Whether the prolog of the XML file ``path`` declares an entity (a parse error there
    is left to the full parse, which names it)."""
    found = []

    def entity(name, *_):
        found.append(name)
        raise _RootReached

    def start(*_):
        raise _RootReached

    parser = expat.ParserCreate()
    parser.EntityDeclHandler = entity
    parser.StartElementHandler = start
    with path.open("rb") as stream:
        try:
            while chunk := stream.read(_CHUNK):
                parser.Parse(chunk, False)
            parser.Parse(b"", True)
        except (_RootReached, expat.ExpatError):
            pass
    return bool(found)


def parse_xml(path: str | Path, kind: str) -> ElementTree.Element:
    """The root element of the XML file ``path`` (a ``kind``, e.g. "URDF", in messages);
    SceneError naming the file when it cannot be read, is not well-formed XML or declares an
    entity (module docstring)."""
    path = Path(path)
    try:
        if _declares_entity(path):
            raise SceneError(f"{path}: the {kind} declares an XML entity (<!ENTITY> in its "
                             "<!DOCTYPE>): refused, since expanding entities can exhaust "
                             f"memory (a 'billion laughs') and a {kind} needs none")
        return ElementTree.parse(path).getroot()
    except ElementTree.ParseError as exc:
        raise SceneError(f"{path}: the {kind} is not valid XML ({exc})") from None
    except OSError as exc:
        raise SceneError(f"{path}: cannot read the {kind} ({exc.strerror or exc})") from None
