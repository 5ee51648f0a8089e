"""environment.yml and pyproject.toml must name the same packages with the same bounds."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

ROOT = Path(__file__).resolve().parents[1]


def _normalise(requirement: str) -> tuple[str, str]:
    """Split 'Name_x>=1.2' into ('name-x', '>=1.2') with PEP 503 name normalisation."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*", requirement)
    assert match, f"cannot parse requirement {requirement!r}"
    name, spec = match.groups()
    return re.sub(r"[-_.]+", "-", name).lower(), spec.replace(" ", "")


def _pyproject() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs.extend(extra)
    return dict(_normalise(r) for r in reqs)


def _environment() -> tuple[dict[str, str], list[str]]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda: dict[str, str] = {}
    pip: list[str] = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip.extend(dep.get("pip", []))
            continue
        name, spec = _normalise(dep)
        if name not in {"python", "pip"}:
            conda[name] = spec
    return conda, pip


def test_environment_yml_matches_pyproject() -> None:
    conda, pip = _environment()
    pip_named = dict(_normalise(p) for p in pip if not p.startswith("-"))
    env_all = {**conda, **pip_named}
    py = _pyproject()
    missing = sorted(set(py) - set(env_all))
    extra = sorted(set(env_all) - set(py))
    assert not missing, f"in pyproject.toml but not environment.yml: {missing}"
    assert not extra, f"in environment.yml but not pyproject.toml: {extra}"
    differing = {n: (py[n], env_all[n]) for n in py if py[n] != env_all[n]}
    assert not differing, f"version bounds differ (pyproject, environment.yml): {differing}"


def test_environment_yml_installs_the_project_and_python() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    deps = env["dependencies"]
    pythons = [d for d in deps if isinstance(d, str) and d.startswith("python")]
    assert pythons == ["python>=3.11"], pythons
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert pip_sections and "-e ." in pip_sections[0]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"


def test_the_package_version_is_pyproject_s() -> None:
    """``specsweep.__version__`` is written out (no importlib.metadata at import); it must say the
    version pyproject.toml declares, which is what an installed copy's metadata says too."""
    from importlib import metadata

    import specsweep

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert specsweep.__version__ == declared, "bump lib/specsweep/__init__.py's __version__ with pyproject.toml"
    assert metadata.version("specsweep") == declared, "reinstall: pip install -e '.[test]'"
