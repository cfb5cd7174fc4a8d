"""The public surface is small and deliberate: __all__ lists exactly the public names."""

import types

import tenure
import tenure.fence


def _public(module: object) -> list[str]:
    """Public attributes, less submodules (``tenure.fence`` is reached as a module)."""
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    )


def test_all_is_sorted_and_complete() -> None:
    assert tenure.__all__ == sorted(tenure.__all__)
    assert sorted(tenure.__all__) == _public(tenure)


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in tenure.__all__:
        value = getattr(tenure, name)
        assert value.__doc__, f"tenure.{name} has no docstring"
        assert value.__module__.startswith("tenure._"), f"{name} lives in a public module"


def test_fence_surface() -> None:
    names = tenure.fence.__all__
    assert len(set(names)) == len(names)
    assert sorted(names) == sorted([*_public(tenure.fence), *tenure.fence._LAZY])
    for name in names:
        assert getattr(tenure.fence, name) is not None


def test_the_fence_observer_is_exported_but_loaded_only_when_asked_for() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, tenure.fence; loaded = 'prometheus_client' in sys.modules; "
        "from tenure.fence import FenceObserver; "
        "print(loaded, 'prometheus_client' in sys.modules, FenceObserver.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "tenure._observe._fence"]
