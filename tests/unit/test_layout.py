"""The unit tests mirror the package: every folder under tests/unit names a package (or subpackage) of ``sandbox``
(or ``bench``), so the tests of ``sandbox/service/`` are found in ``tests/unit/service/``; only the checks of the
whole repository sit at the top."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"
KIND_FOLDERS = {
    "android": "the Android kind's tests share fakes of adb and the emulator console (android_fakes.py) "
    "across the agent, backend and task layers"
}
REPOSITORY_CHECKS = {
    "test_engine_watch.py",
    "test_environment.py",
    "test_hardening_tables.py",
    "test_layout.py",
    "test_no_import_cycles.py",
}


def test_every_test_folder_names_a_package() -> None:
    strays = []
    for folder in sorted(p for p in UNIT.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(UNIT)
        if str(relative) not in KIND_FOLDERS and not any(
            (base / relative / "__init__.py").is_file() for base in (ROOT / "sandbox", ROOT)
        ):
            strays.append(str(relative))
    assert strays == [], f"tests/unit folders that name no package of sandbox/ (or bench/): {strays}"


def test_only_repository_checks_sit_at_the_top() -> None:
    top = {p.name for p in UNIT.glob("test_*.py")}
    assert top <= REPOSITORY_CHECKS, (
        f"move these into the folder of the package they test: {sorted(top - REPOSITORY_CHECKS)}"
    )
