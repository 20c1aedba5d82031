"""The dashboard's static files: its own page, script and style (package data beside this module) and plotly.js,
served from the installed `plotly` package (the `agent` extra) — nothing is fetched from a CDN, at any time.

Each file is read once, on first request, with an ETag (browsers revalidate instead of re-downloading) and a gzip
copy: plotly.min.js is ~4.8 MB, ~1.4 MB compressed.

One substitution: at load, plotly.js adds maplibre's stylesheet (for map traces) as an inline <style> — unless an
element with that style's id is already in the page. The dashboard's Content-Security-Policy refuses inline styles,
so every page load logged a violation. index.html carries an empty <template> whose id is filled in here with the
id found in the installed plotly.min.js (it is a content hash, so it changes with plotly's version); plotly then
skips the injection. The dashboard draws no maps.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import re
import threading
from dataclasses import dataclass
from pathlib import Path

STATIC_DIR = Path(__file__).with_name("static")
PLOTLY_PATH = "vendor/plotly.min.js"
MAP_STYLE_PLACEHOLDER = b"plotly-map-style-id"  # in index.html
# plotly.js's guard before injecting maplibre's CSS: `if(!document.getElementById("<hash>")){… createElement("style")`
_MAP_STYLE_GUARD = re.compile(rb'getElementById\("([0-9a-f]{16,128})"\)\)\{var \w+=document\.createElement\("style"\)')

_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    gzipped: bytes
    content_type: str
    etag: str


def plotly_map_style_id(plotly_js: bytes) -> bytes | None:
    """The id plotly.js gives the inline <style> it adds for maplibre, or None if this build has no such guard."""
    found = _MAP_STYLE_GUARD.search(plotly_js)
    return found.group(1) if found else None


def plotly_js_file() -> Path | None:
    """plotly.min.js inside the installed `plotly` package (found without importing it), or None."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "package_data" / "plotly.min.js"
        if candidate.is_file():
            return candidate
    return None


class Assets:
    """Static files by URL path below /static/ (e.g. `app.js`, `vendor/plotly.min.js`); anything else is None."""

    def __init__(self, static_dir: Path = STATIC_DIR, plotly_js: Path | None = None) -> None:
        self._files: dict[str, Path] = {
            path.name: path for path in static_dir.iterdir() if path.is_file() and path.suffix in _CONTENT_TYPES
        }
        plotly = plotly_js or plotly_js_file()
        if plotly is not None:
            self._files[PLOTLY_PATH] = plotly
        self._loaded: dict[str, Asset] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Asset | None:
        path = self._files.get(name)  # only names listed at start-up: no path from the URL reaches the disk
        if path is None:
            return None
        with self._lock:
            asset = self._loaded.get(name)
            if asset is None:
                body = path.read_bytes()
                if name == "index.html":
                    body = body.replace(MAP_STYLE_PLACEHOLDER, self._map_style_id())
                asset = Asset(
                    body=body,
                    gzipped=gzip.compress(body, compresslevel=6, mtime=0),
                    content_type=_CONTENT_TYPES[path.suffix],
                    etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"',
                )
                self._loaded[name] = asset
        return asset

    def _map_style_id(self) -> bytes:
        plotly = self._files.get(PLOTLY_PATH)
        found = plotly_map_style_id(plotly.read_bytes()) if plotly is not None else None
        return found or MAP_STYLE_PLACEHOLDER  # no guard to satisfy: the placeholder stays, inert
