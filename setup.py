"""Package mapping: the SDK is `parity`, services/<name> is `parity.services.<name>`.

Everything else lives in pyproject.toml; setuptools cannot express a second source root
there without listing every subpackage by hand.
"""

from setuptools import find_packages, setup

SERVICE_PACKAGES = ["parity.services"] + [
    f"parity.services.{name}" for name in find_packages("services")
]

setup(
    packages=find_packages("sdk") + SERVICE_PACKAGES,
    package_dir={"parity": "sdk/parity", "parity.services": "services"},
    package_data={
        "parity": ["py.typed", "api/**/*.pyi", "training/verifiers_bridge/*.py"],
        "parity.services.console": ["templates/*.html", "static/*"],
    },
)
