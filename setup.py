"""Packaging for gau_keras (``pip install -e .``)."""

from setuptools import find_packages, setup


def runtime_requirements(path="requirements.txt"):
    """The lines of requirements.txt above its '# Tests' section."""
    requirements = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# Tests"):
                break
            if line.strip() and not line.startswith("#"):
                requirements.append(line.strip())
    return requirements


setup(
    name="gau_keras",
    version="0.1.0",
    description="GAU-alpha, RoFormerV2 and SRU++ for Keras 3 / TensorFlow 2, bert4keras-compatible.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # only gau_keras: the apps are gau_keras.training.*; the checkout's pretrain/ and finetune/
    # folders hold their script entry points and configs, not installed (no top-level name clash)
    packages=find_packages(include=["gau_keras", "gau_keras.*"]),
    package_data={"gau_keras": ["pretrained/*/*", "recurrence/tensorflow/native/*.cc"]},
    include_package_data=True,
    python_requires=">=3.9",
    install_requires=runtime_requirements(),
    extras_require={
        "lac": ["lac", "paddlepaddle>=2.6"],
        "test": ["pytest>=7.4"],
    },
    entry_points={"console_scripts": ["gau-keras=gau_keras.__main__:main"]},
)
