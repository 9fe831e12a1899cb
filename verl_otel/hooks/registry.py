"""Hook targets as data, installed when their verl module is imported.

Ray freezes an actor's methods when the class is made remote, so patches must be in place at import
time in every process: each target registers a post-import hook (:mod:`.import_hooks`) that wraps the
function (with wrapt, imported then) the moment its module loads (or at once if it is already loaded).
Adding a verl version is adding a row.
A target that cannot be hooked (renamed, moved, outside its version range) is said on the process role's
start-up line (:mod:`.coverage`); training goes on.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from verl_otel._log import logger, warn_once
from verl_otel.hooks import import_hooks

if TYPE_CHECKING:
    from typing import Any

    Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True)
class HookTarget:
    module: str  # e.g. "verl.trainer.ppo.ray_trainer"
    attr: str  # e.g. "RayPPOTrainer.fit" (dotted path inside the module)
    wrapper: str | Wrapper  # "verl_otel.hooks.trainer:fit_legacy", resolved when ``module`` is imported
    feature: str  # what is lost without it, for the warning
    min_verl: str = "0.0"
    max_verl: str | None = None  # exclusive
    # "wrapt": a wrapt wrapper in place; "method": a plain function calling the wrapper (Ray's actor runtime
    # bypasses wrapt proxies, seen with ray 2.60); "replace": the wrapper maps verl's original to its
    # replacement (None: cannot hook this one), where a proxy cannot go (decorators that inspect frames);
    # "add": a method of ours that verl's class lacks (a Ray actor's methods are fixed when it is made
    # remote: ours must be on the class by then), removed again by uninstall
    how: str = "wrapt"
    # the process role it runs in (semconv's PROCESS_ROLE_*): its start-up line counts it (hooks/coverage.py); every row
    # of hooks/targets.py names one (tests/test_version_drift.py)
    process_role: str | None = None

    @property
    def key(self) -> str:
        return f"{self.module}.{self.attr}"


def resolve(spec: str | Wrapper) -> Any:
    """``"package.module:function"`` -> the function (imports the module)."""
    if not isinstance(spec, str):
        return spec
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def plain_method(original: Any, wrapper: Wrapper) -> Any:
    """A plain (async where the original is) function calling ``wrapper(bound, self, args,
    kwargs)``; ``functools.wraps`` keeps verl's ``@register`` metadata on it."""
    import inspect

    if not callable(original):
        return None
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await wrapper(functools.partial(original, self), self, args, kwargs)

    else:

        @functools.wraps(original)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return wrapper(functools.partial(original, self), self, args, kwargs)

    return method


_lock = threading.RLock()  # re-entered when resolving a wrapper imports a module with hooks of its own
_active: dict[str, HookTarget] = {}  # registered and wanted
_originals: dict[str, tuple[Any, str, Any]] = {}  # key -> (owner, attribute name, original)
_off: dict[str, str] = {}  # key -> why it could not be hooked (for the start-up line, hooks/coverage.py)
_late = False  # a start-up line was printed: later failures get a line of their own
_registered_hooks: set[str] = set()  # post-import hooks cannot be removed: remember which exist


def verl_version() -> str | None:
    import importlib.metadata  # here, not at start-up: every process of the venv imports this module

    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None


def _in_range(target: HookTarget, version: str | None) -> bool:
    """A build between releases (``0.10.0.dev0`` from git, ``0.10.0rc1``) may hold either side's code: it
    passes ``min_verl`` as its release would and ``max_verl`` as itself, and resolution decides. A post
    release (``0.9.1.post1``) or a local one (``+g1234``) counts as its release."""
    if version is None:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
        if Version(v.base_version) < Version(target.min_verl):
            return False
        return target.max_verl is None or v < Version(target.max_verl)
    except InvalidVersion:
        return True


def _record_off(key: str, reason: str, feature: str) -> None:
    """Why ``key`` is not hooked: said on the process role's start-up line, or at once when that line is out."""
    _off[key] = reason
    if _late:
        warn_once(f"off:{key}", f"hook target {key} is not hooked ({reason}): {feature} is off; training continues")
    else:
        logger.debug("hook target %s not hooked: %s", key, reason)


def _resolve(module: ModuleType, attr: str) -> tuple[Any, str] | None:
    owner: Any = module
    *parents, name = attr.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    if isinstance(owner, type):
        # wrap where it is defined on the class itself, never a base class' copy
        if name not in owner.__dict__:
            return None
    elif not hasattr(owner, name):
        return None
    return owner, name


_ABSENT = object()  # the "original" of an added method


def _resolve_new(module: ModuleType, attr: str) -> tuple[Any, str] | None:
    """The class that should get a new method ``attr``: it must exist and not have one of that name."""
    owner_path, _, name = attr.rpartition(".")
    cls: Any = module
    for part in owner_path.split("."):
        cls = getattr(cls, part, None)
    if not isinstance(cls, type) or name in cls.__dict__:
        return None
    return cls, name


def _apply(key: str, module: ModuleType) -> None:
    with _lock:
        target = _active.get(key)
        if target is None or key in _originals:
            return
        version = verl_version()
        if not _in_range(target, version):
            return
        found = _resolve(module, target.attr) if target.how != "add" else _resolve_new(module, target.attr)
        if found is None:
            reason = (
                f"cannot add {target.attr} in {target.module} of verl {version}: no such class, or it has one"
                if target.how == "add"
                else f"{target.attr} not in {target.module} of verl {version}: renamed?"
            )
            _record_off(key, reason, target.feature)
            return
        owner, name = found
        if target.how == "add":
            original = _ABSENT
        else:
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        try:
            wrapper = resolve(target.wrapper)
        except Exception as exc:  # noqa: BLE001 - our own module failed to import: hook nothing, say so
            _record_off(key, f"our wrapper failed to load: {exc!r}", target.feature)
            return
        if target.how == "add":
            setattr(owner, name, wrapper)
        elif target.how == "wrapt":
            import wrapt

            wrapt.wrap_function_wrapper(owner, name, wrapper)
        else:
            new = wrapper(original) if target.how == "replace" else plain_method(original, wrapper)
            if new is None:
                _record_off(key, f"{target.attr} has an unexpected shape in verl {version}", target.feature)
                return
            setattr(owner, name, new)
        _originals[key] = (owner, name, original)
        logger.debug("hooked %s in pid %s", key, os.getpid())
    if target.process_role == "trainer":
        _watch_ends()


def _watch_ends() -> None:
    """A process that may run fit(): the end watch (process/ends.py) goes on now if this is its main thread, so a
    fit() that runs on another thread (fully_async's coroutine, on the actor's event loop) can listen later."""
    from verl_otel.process.ends import WATCH

    WATCH.install()


def install(targets: Iterable[HookTarget]) -> None:
    for target in targets:
        with _lock:
            _active[target.key] = target
            first = target.key not in _registered_hooks
            _registered_hooks.add(target.key)
        if first:
            import_hooks.register(target.module, functools.partial(_apply, target.key))
        else:
            import sys

            mod = sys.modules.get(target.module)
            if mod is not None:
                _apply(target.key, mod)


def uninstall(targets: Iterable[HookTarget]) -> None:
    """Restore verl's original functions exactly (symmetric to :func:`install`)."""
    for target in targets:
        with _lock:
            _active.pop(target.key, None)
            _off.pop(target.key, None)
            found = _originals.pop(target.key, None)
        if found is None:
            continue
        owner, name, original = found
        if original is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def installed() -> list[str]:
    with _lock:
        return sorted(_originals)


def registered() -> list[HookTarget]:
    """Every target installed and not uninstalled, hooked or not."""
    with _lock:
        return list(_active.values())


def off_reasons() -> dict[str, str]:
    """Key -> why a target whose module was imported could not be hooked."""
    with _lock:
        return dict(_off)


def reported() -> None:
    """A start-up line said what is off: a failure from now on gets a line of its own."""
    global _late
    _late = True
