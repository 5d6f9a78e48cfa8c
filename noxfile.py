"""Sessions: `nox -l` lists them; logic lives in the bench package."""

import nox

nox.options.default_venv_backend = "venv"


@nox.session(name="results")
def results(session: nox.Session) -> None:
    """Regenerate results/README.md and plots from results/records (-- --check: ranges only)."""
    session.install("-e", ".[results]")
    session.run("python", "-m", "bench", "results", *session.posargs)
