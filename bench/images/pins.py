"""Load ``images/pins.toml`` (upstreams and image targets) and ``images/polaris/recipe.toml``."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PINS_FILE = REPO_ROOT / "images" / "pins.toml"
POLARIS_RECIPE = REPO_ROOT / "images" / "polaris" / "recipe.toml"
UPSTREAM_KINDS = ("pypi", "github")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Upstream:
    """A source that a patch series applies to: a PyPI wheel or a GitHub commit."""

    name: str
    kind: str
    series: str  # path of the series file relative to the repo root; "" for none
    package: str = ""  # pypi
    version: str = ""  # pypi
    repo: str = ""  # github owner/name
    commit: str = ""  # github, 40 hex digits
    install_dir: str = ""  # github: where the image keeps the patched tree

    @property
    def pin(self) -> str:
        """``package==version`` or ``owner/name@commit``."""
        return f"{self.package}=={self.version}" if self.kind == "pypi" else f"{self.repo}@{self.commit}"

    @property
    def archive_url(self) -> str:
        """The source archive of a GitHub commit."""
        return f"https://codeload.github.com/{self.repo}/tar.gz/{self.commit}"


@dataclass(frozen=True)
class Target:
    """One image recipe: its Dockerfile, default base, pinned packages and upstreams.

    ``base`` is the base image's tag (for humans); ``base_digest`` its manifest digest, "" when no
    published digest is known (the base is then pinned by tag only).
    """

    name: str
    dockerfile: str
    image: str
    registry: str
    base: str
    base_digest: str
    packages: tuple[str, ...]
    requirements: tuple[str, ...]
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


@dataclass(frozen=True)
class Pins:
    upstreams: dict[str, Upstream]
    targets: dict[str, Target]

    def target(self, name: str) -> Target:
        if name not in self.targets:
            raise ValueError(f"unknown image target {name!r}; choose one of {sorted(self.targets)}")
        return self.targets[name]


@dataclass(frozen=True)
class ModuleFacts:
    """What one conda module ships (``python`` empty: not known here, checked when building)."""

    torch: str
    source: str
    python: str = ""


@dataclass(frozen=True)
class PolarisRecipe:
    """The Polaris conda module + venv recipe (no container on Polaris).

    ``requires``: the lowest ``python`` and ``torch`` the pins accept; ``conda_modules``: what each
    known module ships, by module name.
    """

    conda_module: str
    venv: str
    packages: tuple[str, ...]
    requirements: tuple[str, ...]
    upstream: str
    checkout: str
    module_path: str = ""
    flash_attention: bool = False  # the module has flash-attn 2, checked when building
    requires: dict[str, str] = field(default_factory=dict)
    conda_modules: dict[str, ModuleFacts] = field(default_factory=dict)


def _require(table: dict, key: str, where: str, kind: type = str):
    if key not in table:
        raise ValueError(f"{where}: missing key {key!r}; add it")
    value = table[key]
    if not isinstance(value, kind):
        raise ValueError(f"{where}: key {key!r} must be a {kind.__name__}, got {value!r}")
    return value


def _pinned(specs: list, where: str) -> tuple[str, ...]:
    for spec in specs:
        if not isinstance(spec, str) or "==" not in spec:
            raise ValueError(f"{where}: {spec!r} is not pinned; write it as name==version")
    return tuple(specs)


def _digest(table: dict, where: str) -> str:
    digest = _require(table, "base_digest", where)
    if digest and not DIGEST.match(digest):
        raise ValueError(f"{where}: base_digest {digest!r} is not sha256:<64 hex digits>; give "
                         "the published digest, or \"\" when none is known (tag only)")
    return digest


def load_pins(path: Path = PINS_FILE) -> Pins:
    """Parse and check the pins file; ValueError names the file and the key at fault."""
    data = tomllib.loads(path.read_text())
    upstreams = {}
    for name, table in _require(data, "upstreams", str(path), dict).items():
        where = f"{path} [upstreams.{name}]"
        kind = _require(table, "kind", where)
        if kind not in UPSTREAM_KINDS:
            raise ValueError(f"{where}: kind {kind!r} is not one of {UPSTREAM_KINDS}")
        fields = {k: _require(table, k, where) for k in table if k != "kind"}
        needed = ("package", "version") if kind == "pypi" else ("repo", "commit")
        for key in (*needed, "series"):
            _require(table, key, where)
        if kind == "github" and (len(table["commit"]) != 40 or not table["commit"].isalnum()):
            raise ValueError(f"{where}: commit must be a full 40-hex-digit commit, not a branch")
        upstreams[name] = Upstream(name=name, kind=kind, **fields)
    targets = {}
    for name, table in _require(data, "targets", str(path), dict).items():
        where = f"{path} [targets.{name}]"
        uses = _require(table, "upstreams", where, list) + _require(table, "optional_upstreams", where, list)
        for used in uses:
            if used not in upstreams:
                raise ValueError(f"{where}: upstream {used!r} is not defined under [upstreams]")
        targets[name] = Target(
            name=name,
            dockerfile=_require(table, "dockerfile", where),
            image=_require(table, "image", where),
            registry=_require(table, "registry", where),
            base=_require(table, "base", where),
            base_digest=_digest(table, where),
            packages=_pinned(_require(table, "packages", where, list), where),
            requirements=_pinned(_require(table, "requirements", where, list), where),
            upstreams=tuple(table["upstreams"]),
            optional_upstreams=tuple(table["optional_upstreams"]),
        )
    return Pins(upstreams=upstreams, targets=targets)


def load_polaris_recipe(path: Path = POLARIS_RECIPE) -> PolarisRecipe:
    data = tomllib.loads(path.read_text())
    where = str(path)
    return PolarisRecipe(
        conda_module=_require(data, "conda_module", where),
        venv=_require(data, "venv", where),
        packages=_pinned(_require(data, "packages", where, list), where),
        requirements=_pinned(_require(data, "requirements", where, list), where),
        upstream=_require(data, "upstream", where),
        checkout=_require(data, "checkout", where),
        module_path=data.get("module_path", ""),
        flash_attention=data.get("flash_attention", False),
        requires=_versions(_require(data, "requires", where, dict), f"{where} [requires]"),
        conda_modules={name: _module_facts(table, f"{where} [conda_modules.\"{name}\"]")
                       for name, table in _require(data, "conda_modules", where, dict).items()},
    )


def _versions(table: dict, where: str) -> dict[str, str]:
    for key in ("python", "torch"):
        _require(table, key, where)
    unknown = set(table) - {"python", "torch"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: python, torch")
    return dict(table)


def _module_facts(table: dict, where: str) -> ModuleFacts:
    unknown = set(table) - {"python", "torch", "source"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                         "allowed: python, torch, source")
    return ModuleFacts(torch=_require(table, "torch", where), source=_require(table, "source", where),
                       python=table.get("python", ""))
