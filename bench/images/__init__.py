"""Container images for the kit: pins, patch series, build contexts, builds, pushes and pulls.

Vocabulary: a *target* is one image recipe (``cuda``, ``rocm``) or the Polaris venv recipe; an
*upstream* is a source the target patches (a PyPI wheel or a GitHub commit); a *series* is the
ordered list of patches for one upstream (``patches/<upstream>/series``). Pins live in
``images/pins.toml`` and nowhere else.
"""
