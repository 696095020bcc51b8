"""Package list for setuptools: the packages under src/, plus onnxviz.resources (and its
data folders), which pyproject.toml maps to resources/ at the top of the repository:
setuptools' find cannot reach a folder outside src/."""

from setuptools import find_packages, setup

RESOURCES = ["onnxviz.resources", "onnxviz.resources.examples", "onnxviz.resources.icons"]

setup(packages=[*find_packages("src"), *RESOURCES])
