"""Fixtures: the repository, and the `pdsim` binary whose bytes the package must match.

The binary is $PDSIM, else $CARGO_TARGET_DIR/release/pdsim, else target/release/pdsim
(`cargo test --release` or `cargo build --release` builds it)."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _binary() -> Path:
    if os.environ.get("PDSIM"):
        return Path(os.environ["PDSIM"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    return target / "release" / "pdsim"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def cli():
    """Runs the CLI from the repository root; returns (exit code, stdout, stderr)."""
    exe = _binary()
    if not exe.is_file():
        pytest.fail(
            f"the pdsim binary {exe} is missing: build it with `cargo build --release` "
            "(or set PDSIM to it) — these tests compare the package's bytes with the CLI's"
        )

    def call(*args: str):
        p = subprocess.run([str(exe), *map(str, args)], cwd=ROOT, capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr

    return call


@pytest.fixture(autouse=True)
def _in_root(monkeypatch):
    """Relative scenario paths resolve from the repository root, as the CLI's do in CI."""
    monkeypatch.chdir(ROOT)
