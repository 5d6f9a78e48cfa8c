"""Load ``images/pins.toml`` (upstreams and image targets) and ``images/polaris/recipe.toml``.

The models are the files' schema (``results/schema/pins.schema.json``): unknown keys are refused and
every error names the file and the table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from bench.schema import Strict, load_toml

REPO_ROOT = Path(__file__).resolve().parents[2]
PINS_FILE = REPO_ROOT / "images" / "pins.toml"
POLARIS_RECIPE = REPO_ROOT / "images" / "polaris" / "recipe.toml"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _pinned(specs: tuple[str, ...]) -> tuple[str, ...]:
    for spec in specs:
        if "==" not in spec:
            raise ValueError(f"{spec!r} is not pinned; write it as name==version")
    return specs


Pinned = Annotated[tuple[str, ...], AfterValidator(_pinned)]


def _digest(digest: str) -> str:
    if digest and not DIGEST.match(digest):
        raise ValueError(f"base_digest {digest!r} is not sha256:<64 hex digits>; give the "
                         "published digest, or \"\" when none is known (tag only)")
    return digest


class Upstream(Strict):
    """A source that a patch series applies to: a PyPI wheel or a GitHub commit."""

    name: SkipJsonSchema[str] = Field("", exclude=True)  # the table's key, set when loaded
    kind: Literal["pypi", "github"]
    series: str  # path of the series file relative to the repo root; "" for none
    package: str = ""  # pypi
    version: str = ""  # pypi
    repo: str = ""  # github owner/name
    commit: Annotated[str, Field(pattern=r"^([0-9a-f]{40})?$")] = ""  # github, a full commit
    install_dir: str = ""  # github: where the image keeps the patched tree

    @model_validator(mode="after")
    def _complete(self) -> Upstream:
        needed = ("package", "version") if self.kind == "pypi" else ("repo", "commit")
        missing = [key for key in needed if not getattr(self, key)]
        if missing:
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


class Target(Strict):
    """One image recipe: its Dockerfile, default base, pinned packages and upstreams.

    ``base`` is the base image's tag (for humans); ``base_digest`` its manifest digest, "" when no
    published digest is known (the base is then pinned by tag only).
    """

    name: SkipJsonSchema[str] = Field("", exclude=True)  # the table's key, set when loaded
    dockerfile: str
    image: str
    registry: str
    base: str
    base_digest: Annotated[str, AfterValidator(_digest)]
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
                    raise ValueError(f"targets.{name}: upstream {used!r} is not defined under "
                                     "[upstreams]")
        for group in ("upstreams", "targets"):  # each table knows its key, which names it
            tables = getattr(self, group)
            if any(table.name for table in tables.values()):
                raise ValueError(f"[{group}.*] unknown key(s) name: the table's key names it")
            object.__setattr__(self, group, {key: table.model_copy(update={"name": key})
                                             for key, table in tables.items()})
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
    missing = [key for key in ("python", "torch") if key not in requires]
    if missing:
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
