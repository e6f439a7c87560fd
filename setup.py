"""Map the top-level folders onto the ``rocketscope`` namespace.

The folders broker/, telemetry/, trace/, spark/ and dashboards/ are the architecture
(docs/ARCHITECTURE.md), but a top-level package named ``trace`` would be shadowed by the
standard library's module of that name.  Every folder is therefore installed as a
sub-package of ``rocketscope`` (``rocketscope.trace`` lives in ``trace/``), both for
``pip install .`` and for ``pip install -e .`` (setuptools' editable finder honours
``package_dir``).
"""

from setuptools import Extension, find_packages, setup

FOLDERS = {
    "rocketscope": "rocketscope",
    "rocketscope.broker": "broker",
    "rocketscope.telemetry": "telemetry",
    "rocketscope.trace": "trace",
    "rocketscope.spark": "spark",
    "rocketscope.dashboards": "dashboards",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for name, folder in FOLDERS.items():
    packages.append(name)
    package_dir[name] = folder
    for sub in find_packages(where=folder):
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"rocketscope.dashboards": ["*.toml", "pages/*.py"], "rocketscope.broker": ["protocol/*.proto"]},
    # The remoting send path's byte layouts in C (issue 20; docs/ARCHITECTURE.md "Compiled send path"): a plain
    # CPython extension, so the build needs only a C compiler and Python's headers, nothing from a registry.
    # optional=False: a failed compile fails `pip install` (and so `make test`) instead of leaving the broker
    # silently on the pure-Python path; ROCKETSCOPE_PURE_PYTHON=1 selects that path at run time.
    # depends=: both include broker/store_dispatch.h (the store's dispatch core), so a change to it rebuilds both.
    ext_modules=[Extension("rocketscope.broker.fastpath", ["broker/fastpath.c"], optional=False,
                           depends=["broker/store_dispatch.h"],
                           extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"]),
                 # the Raft peer frames' RaftBatch codec (docs/RAFT.md "Peer frames"), a module of its own
                 Extension("rocketscope.broker.raftpath", ["broker/raftpath.c"], optional=False,
                           depends=["broker/store_dispatch.h"],
                           extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"])],
)
