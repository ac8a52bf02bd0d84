"""Build of the optional native record decoder (``aiozkconsumer.kafka._native``).

Everything else is declared in ``pyproject.toml``. The extension is optional: where no C
compiler is found the install goes on and the consumer uses aiokafka's record parser
(``aiozkconsumer.kafka.native.AVAILABLE`` tells which one runs).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "aiozkconsumer.kafka._native",
            ["aiozkconsumer/kafka/_native.c"],
            extra_compile_args=[
                "-O3",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
                "-Wno-missing-field-initializers",
            ],
            optional=True,
        )
    ]
)
