"""The service is a facade over parts, not a chain of mixins (``sandbox/service/service.py``, docs/architecture.md):

- no class of ``sandbox.service`` has more than one base of the package's own, so no hierarchy there is deeper than
  two (a chain of mixins, where a method further down silently overrides one above, cannot grow back);
- no two parts of the facade define a public method of the same name that the facade has too: each call of the
  facade belongs to one part (``EpisodeOps.step`` silently overrode ``ActingOps.step``; now the facade's ``step``
  calls acting and episodes by name);
- the facade's methods are its own (it has no base but ``object``), and the parts built for it take their
  collaborators by keyword only.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterable, Iterator

import sandbox.service as package
from sandbox.service import SandboxService

PACKAGE = "sandbox.service"
PART_PACKAGES = (PACKAGE, "sandbox.capacity")
"""Where the facade's parts come from: its own package, and the admission (``sandbox.capacity``)."""
POSITIONAL_BEFORE = {"Instances", "Pools"}
"""Parts that took their backend and store positionally before the facade was built; left as they were."""


def _in(cls: type, packages: tuple[str, ...]) -> bool:
    return any(cls.__module__ == p or cls.__module__.startswith(p + ".") for p in packages)


def _classes() -> Iterator[type]:
    """Every class defined in a module of ``sandbox.service``."""
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def too_deep(classes: Iterable[type]) -> dict[str, list[str]]:
    """The classes with more than one ancestor of the package's own: name -> those ancestors."""
    found = {}
    for cls in classes:
        ancestors = [base.__name__ for base in cls.__mro__[1:] if _in(base, (PACKAGE,))]
        if len(ancestors) > 1:
            found[f"{cls.__module__}.{cls.__qualname__}"] = ancestors
    return found


def public_methods(cls: type) -> set[str]:
    """The public callables a class defines, itself or through its bases (``object``'s aside)."""
    return {
        name
        for klass in cls.__mro__
        if klass is not object
        for name, value in vars(klass).items()
        if not name.startswith("_") and callable(value)
    }


def shadowed(parts: dict[str, type], facade: type) -> dict[str, list[str]]:
    """The public methods of the facade that more than one part defines: method -> the parts defining it."""
    owners: dict[str, list[str]] = {}
    for attribute, cls in parts.items():
        for name in public_methods(cls):
            owners.setdefault(name, []).append(f"{attribute} ({cls.__qualname__})")
    facade_methods = public_methods(facade)
    return {name: found for name, found in owners.items() if len(found) > 1 and name in facade_methods}


def parts_of(service: SandboxService) -> dict[str, type]:
    """The facade's parts: its attributes whose class is one of the service's (or the admission)."""
    return {name: type(value) for name, value in vars(service).items() if _in(type(value), PART_PACKAGES)}


# --------------------------------------------------------------------------- the checks check


def test_the_depth_check_finds_a_chain_of_three() -> None:
    class Core:
        pass

    class Ops(Core):
        pass

    class More(Ops):
        pass

    for cls in (Core, Ops, More):
        cls.__module__ = f"{PACKAGE}.example"
    assert too_deep([Core, Ops, More]) == {f"{PACKAGE}.example.{More.__qualname__}": ["Ops", "Core"]}
    assert too_deep([Core, Ops]) == {}


def test_the_shadow_check_finds_two_parts_with_the_facades_method() -> None:
    class Acting:
        async def step(self) -> None: ...

    class Episodes:
        async def step(self) -> None: ...

        async def evaluate(self) -> None: ...

    class Facade:
        async def step(self) -> None: ...

        async def evaluate(self) -> None: ...

    found = shadowed({"acting": Acting, "episodes": Episodes}, Facade)
    assert list(found) == ["step"], found
    assert shadowed({"episodes": Episodes}, Facade) == {}


# --------------------------------------------------------------------------- the service


def test_no_class_in_the_service_has_more_than_one_base_of_the_package() -> None:
    classes = list(_classes())
    assert SandboxService in classes
    assert too_deep(classes) == {}, "a hierarchy deeper than two in sandbox/service: compose parts instead"


def test_the_facade_has_no_base_but_object() -> None:
    assert SandboxService.__bases__ == (object,)


def test_no_two_parts_define_a_method_the_facade_has(service: SandboxService) -> None:
    parts = parts_of(service)
    for expected in ("records", "provisioner", "leases", "acting", "episodes", "snapshots", "admission", "pools"):
        assert expected in parts, f"the facade holds no part {expected!r}: {sorted(parts)}"
    assert shadowed(parts, SandboxService) == {}, "two parts define a method the facade has: which one is called?"


def test_the_parts_take_their_collaborators_by_keyword(service: SandboxService) -> None:
    positional = {}
    for name, cls in parts_of(service).items():
        if not _in(cls, (PACKAGE,)) or cls.__qualname__ in POSITIONAL_BEFORE:
            continue
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        loose = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        if loose:
            positional[name] = loose
    assert positional == {}, "a part's collaborators are keyword-only (kopf's operator(*, lifecycle=..., ...))"
