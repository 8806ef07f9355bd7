"""Build hook: the benchmark configs (``benchmarks/configs/*.yaml``) ship inside the wheel as
``sketchwm/bench/configs/``, so ``sketchwm bench run smoke`` finds them by name after ``pip install``.
Everything else about the package is declared in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithConfigs(build_py):
    """``build_py`` that also copies ``benchmarks/configs/*.yaml`` into ``sketchwm/bench/configs``."""

    def run(self) -> None:
        super().run()
        src = Path(__file__).resolve().parent / "benchmarks" / "configs"
        dst = Path(self.build_lib) / "sketchwm" / "bench" / "configs"
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.glob("*.yaml")):
            shutil.copy2(f, dst / f.name)


setup(cmdclass={"build_py": BuildPyWithConfigs})
