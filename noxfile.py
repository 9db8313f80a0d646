"""Sessions that test the workspace together: `uv run nox` runs the default ones (what CI runs)."""

from __future__ import annotations

import runpy
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "none"

PACKAGES = ["kernels", "engine", "offload", "api", "cli"]


def _uv_sync(session: nox.Session) -> None:
    # --all-extras brings the API tests' SDKs (openai, anthropic, hypothesis).
    session.run("uv", "sync", "--all-packages", "--all-extras", "--frozen", external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """CPU tests of every package (GPU tests are skipped without CUDA)."""
    _uv_sync(session)
    paths = [f"packages/revolta-{p}/tests" for p in PACKAGES if (ROOT / f"packages/revolta-{p}/tests").is_dir()]
    session.run("uv", "run", "--frozen", "--all-packages", "--all-extras", "pytest", "-q", "-rs", "--timeout=900", *paths, *session.posargs,
                external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole workspace."""
    _uv_sync(session)
    session.run("uv", "run", "--frozen", "--all-packages", "--all-extras", "ruff", "check", "packages", "benchmarks", "noxfile.py", external=True)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy on the engine, the KV offload tiers, the HTTP layer and the command line."""
    _uv_sync(session)
    session.run("uv", "run", "--frozen", "--all-packages", "--all-extras", "mypy", "packages/revolta-engine/src/revolta_engine",
                "packages/revolta-offload/src/revolta_offload", "packages/revolta-api/src/revolta_api",
                "packages/revolta-cli/src/revolta_cli", external=True)


# The kernel sessions (kernels_sm70, kernels_build) live beside the kernels they check.
_kernel_sessions = ROOT / "packages/revolta-kernels/noxsessions.py"
if _kernel_sessions.exists():
    globals().update({k: v for k, v in runpy.run_path(str(_kernel_sessions)).items() if not k.startswith("_")})

nox.options.sessions = [name for name in ("lint", "typecheck", "tests", "kernels_sm70", "kernels_build")
                        if name in globals()]
