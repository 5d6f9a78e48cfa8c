"""The kit's build is declared in pyproject.toml; this file adds the one thing it cannot say: the
checkout's ``platforms/`` folder travels in the wheel as the package ``bench.platforms``
(``bench/config/paths.py`` reads it there), so an installed kit plans without a checkout."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["bench*"]), "bench.platforms"],
      package_dir={"bench.platforms": "platforms"})
