"""docs/methods.md has one ``## <name>`` section per registered method, and names nothing else."""

from __future__ import annotations

import re

from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.methods import list_methods, validate_params

DOC = PROJECT_ROOT / "docs" / "methods.md"


def _sections() -> dict[str, str]:
    text = DOC.read_text()
    parts = re.split(r"^## +(.+?) *$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_registered_method_has_a_section_and_every_section_is_registered():
    sections = _sections()
    assert sorted(sections) == list_methods()


def test_sections_embed_existing_figures_and_show_an_override():
    for name, body in _sections().items():
        assert f"method={name}" in body, name
        for target in re.findall(r"\]\((figures/[^)]+)\)", body):
            assert (DOC.parent / target).is_file(), (name, target)
        assert f"figures/method_{name}.png" in body, name


def test_sections_name_every_parameter_with_its_default():
    """Each parameter appears as ``key = value`` (chains like ``a = b = 0.15`` allowed; ``null``, ``true``, ``false``)
    with the registry default."""
    for name, body in _sections().items():
        for key, value in validate_params(name, {}).items():
            m = re.search(rf"`(?:[a-z_]+ = )*{key}(?: = [a-z_]+)* = ([-+0-9.e]+|null|true|false)`", body)
            assert m, (name, key)
            shown = m.group(1)
            if shown in ("null", "true", "false"):
                assert value is {"null": None, "true": True, "false": False}[shown], (name, key, shown, value)
            else:
                assert not isinstance(value, bool) and float(shown) == value, (name, key, shown, value)
