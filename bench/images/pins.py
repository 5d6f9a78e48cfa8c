"""Load ``images/pins.toml`` (upstreams and image targets) and ``images/polaris/recipe.toml``.

The models are the files' schema (``results/schema/pins.schema.json``): unknown keys are refused and
every error names the file and the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, PrivateAttr, model_validator

from bench.config.paths import KIT_ROOT
from bench.config.schema import Strict, hinted, load_toml

REPO_ROOT = KIT_ROOT  # images/ and patches/: a source checkout's
PINS_FILE = REPO_ROOT / "images" / "pins.toml"
POLARIS_RECIPE = REPO_ROOT / "images" / "polaris" / "recipe.toml"
Pinned = tuple[Annotated[str, hinted("==", "is not pinned; write it as name==version")], ...]


class _Table(Strict):
    """A table of ``pins.toml``; ``name`` is its key there, set when the file is loaded."""

    _name: str = PrivateAttr("")

    @property
    def name(self) -> str:
        return self._name


class Upstream(_Table):
    """A source that a patch series applies to: a PyPI wheel or a GitHub commit."""

    kind: Literal["pypi", "github"]
    series: str  # path of the series file relative to the repo root; "" for none
    package: str = ""  # pypi
    version: str = ""  # pypi
    repo: str = ""  # github owner/name
    commit: Annotated[str, hinted(r"^([0-9a-f]{40})?$", "must be a full 40-digit commit")] = ""
    install_dir: str = ""  # github: where the image keeps the patched tree

    @model_validator(mode="after")
    def _complete(self) -> Upstream:
        needed = ("package", "version") if self.kind == "pypi" else ("repo", "commit")
        if missing := [key for key in needed if not getattr(self, key)]:
            raise ValueError(f"a {self.kind} upstream needs {' and '.join(missing)}")
        return self

    @property
    def pin(self) -> str:
        """``package==version`` or ``owner/name@commit``."""
        return f"{self.package}=={self.version}" if self.kind == "pypi" else f"{self.repo}@{self.commit}"

    @property
    def archive_url(self) -> str:
        """The source archive of a GitHub commit."""
        return f"https://codeload.github.com/{self.repo}/tar.gz/{self.commit}"


class Target(_Table):
    """One image recipe: its Dockerfile, default base, pinned packages and upstreams.

    ``base`` is the base image's tag (for humans); ``base_digest`` its manifest digest, "" when no
    published digest is known (the base is then pinned by tag only).
    """

    dockerfile: str
    image: str
    registry: str
    base: str
    base_digest: Annotated[str, hinted(r"^(sha256:[0-9a-f]{64})?$", "is not sha256:<64 hex digits>; give "
                                       "the published digest, or \"\" when none is known (tag only)")]
    packages: Pinned
    requirements: Pinned
    upstreams: tuple[str, ...]
    optional_upstreams: tuple[str, ...]

    @property
    def base_ref(self) -> str:
        """What builds pull: ``repository@digest`` when the digest is known (a tag beside a
        digest is refused by Singularity and podman), else the tag."""
        if not self.base_digest:
            return self.base
        name = self.base.rsplit("@", 1)[0]
        slash, colon = name.rfind("/"), name.rfind(":")
        return f"{name[:colon] if colon > slash else name}@{self.base_digest}"


class Pins(Strict):
    """``images/pins.toml``: upstream sources and image targets, each pinned once."""

    upstreams: dict[str, Upstream]
    targets: dict[str, Target]

    @model_validator(mode="after")
    def _upstreams_defined(self) -> Pins:
        for name, target in self.targets.items():
            for used in (*target.upstreams, *target.optional_upstreams):
                if used not in self.upstreams:
                    raise ValueError(f"targets.{name}: upstream {used!r} is not defined under [upstreams]")
        for tables in (self.upstreams, self.targets):
            for key, table in tables.items():
                table._name = key
        return self

    def target(self, name: str) -> Target:
        if name not in self.targets:
            raise ValueError(f"unknown image target {name!r}; choose one of {sorted(self.targets)}")
        return self.targets[name]


class ModuleFacts(Strict):
    """What one conda module ships (``python`` empty: not known here, checked when building)."""

    torch: str
    source: str
    python: str = ""


def _both(requires: dict[str, str]) -> dict[str, str]:
    if missing := [key for key in ("python", "torch") if key not in requires]:
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    return requires


class PolarisRecipe(Strict):
    """The Polaris conda module + venv recipe (no container on Polaris); ``conda_modules``: what
    each known module ships, by module name."""

    conda_module: str
    venv: str
    packages: Pinned
    requirements: Pinned
    upstream: str
    checkout: str
    module_path: str = ""
    flash_attention: bool = False  # the module has flash-attn 2, checked when building
    # The lowest python and torch the pins accept.
    requires: Annotated[dict[Literal["python", "torch"], str], AfterValidator(_both)]
    conda_modules: dict[str, ModuleFacts]


def load_pins(path: Path = PINS_FILE) -> Pins:
    """Parse and check the pins file; ValueError names the file and the key at fault."""
    return load_toml(path, Pins)


def load_polaris_recipe(path: Path = POLARIS_RECIPE) -> PolarisRecipe:
    return load_toml(path, PolarisRecipe)
