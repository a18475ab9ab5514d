"""The registry of renderers: every output format is rendered from DIR/report.json alone."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from . import ReportError
from .certificate import SIGNATURE, Certificate
from .html import Html
from .junit import JUnit
from .markdown import Markdown
from .report import Loaded, load


class Renderer(Protocol):
    name: str  # what --format calls it
    filename: str  # what it writes into the report directory

    def render(self, loaded: Loaded) -> str:
        ...


RENDERERS: dict[str, Renderer] = {r.name: r for r in (Html(), Markdown(), JUnit(), Certificate())}


def parse_formats(text: str | None) -> list[str]:
    """--format html,md,...: every name must be a renderer's; none means all of them."""
    if not text:
        return list(RENDERERS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in RENDERERS]
    if unknown or not names:
        raise ReportError(f"no report format named {', '.join(unknown) or repr(text)}; choose from "
                          f"{', '.join(RENDERERS)}")
    return names


def render(directory: Path, formats: list[str] | None = None) -> list[Path]:
    """Write each chosen format beside DIR/report.json; returns the files written."""
    loaded = load(Path(directory))
    written = []
    for name in formats or list(RENDERERS):
        renderer = RENDERERS[name]
        path = loaded.directory / renderer.filename
        path.write_text(renderer.render(loaded))
        written.append(path)
    return written


def remove_outputs(directory: Path) -> None:
    """Remove report.json and every rendering (and a certificate's signature) an earlier run left in DIR."""
    for name in ("report.json", SIGNATURE, *(renderer.filename for renderer in RENDERERS.values())):
        (Path(directory) / name).unlink(missing_ok=True)
