"""Post-import hooks without wrapt at start-up: the start-up hook runs in every Python process of the venv,
and importing wrapt costs ~60 ms there (it pulls asyncio and importlib.metadata). A meta-path finder sees
the watched module names only; the module's own loader runs, then the hooks get the module. A module
already imported gets its hooks at once."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

Hook = Callable[[ModuleType], None]

_lock = threading.RLock()
_hooks: dict[str, list[Hook]] = {}
_finding: set[str] = set()


class _Loader:
    """The module's own loader, with the hooks called after it executed the module."""

    def __init__(self, inner: object, name: str) -> None:
        self._inner, self._name = inner, name

    def __getattr__(self, attr: str) -> object:
        return getattr(self._inner, attr)

    def create_module(self, spec: object) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)  # type: ignore[attr-defined]
        _fire(self._name, module)


class _Finder:
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _hooks or fullname in _finding:
            return None
        import importlib.util

        _finding.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            _finding.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader, fullname)  # type: ignore[assignment]
        return spec


_FINDER = _Finder()


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        hooks = list(_hooks.get(name, ()))
    for hook in hooks:
        _call(hook, name, module)


def _call(hook: Hook, name: str, module: ModuleType) -> None:
    """A hook that fails must not fail verl's ``import``: one line, and the module loads as it is."""
    try:
        hook(module)
    except Exception as exc:  # noqa: BLE001
        from verl_otel._log import warn_once

        warn_once(f"import-hook:{name}", f"cannot hook {name} ({exc!r}); it is not instrumented, training continues")


def register(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` when ``name`` is imported, or now if it already is."""
    with _lock:
        _hooks.setdefault(name, []).append(hook)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    module = sys.modules.get(name)
    if module is not None:
        _call(hook, name, module)
