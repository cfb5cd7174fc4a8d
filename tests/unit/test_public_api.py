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
    assert sorted(names) == _public(tenure.fence)
    for name in names:
        assert getattr(tenure.fence, name) is not None
