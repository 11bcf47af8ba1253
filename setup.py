"""Builds the extension module rkv._rkv with the project's CMake build.

`pip install --no-build-isolation .` runs this (pyproject.toml has the
package's metadata). CMake configures the whole project, for the Python
running pip, in a folder of setuptools' own (or RKV_BUILD_DIR, an existing
build to reuse), builds the target rkv_python only, and the module is
copied where setuptools packs it.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("RKV_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake")
        if not os.environ.get("RKV_BUILD_DIR"):
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                f"-DPython3_EXECUTABLE={sys.executable}",
                "-DRKV_CLIENT_ONLY=ON",
            ])
        subprocess.check_call([
            "cmake", "--build", build_dir, "--target", "rkv_python", "-j", str(os.cpu_count() or 1),
        ])
        built = os.path.join(build_dir, "python", "rkv", os.path.basename(self.get_ext_filename(ext.name)))
        if not os.path.exists(built):
            # RKV_BUILD_DIR's build was configured for another Python.
            sys.exit(f"setup.py: no {built}: {build_dir} builds the module for another Python "
                     f"than {sys.executable}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("rkv._rkv", sources=[])], cmdclass={"build_ext": CMakeBuild})
