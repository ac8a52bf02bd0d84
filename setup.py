"""Build of the optional native extensions: the record decoder (``aiozkconsumer.kafka._native``)
and the ``async for`` hand-out (``aiozkconsumer._handout``).

Everything else is declared in ``pyproject.toml``. The extension is optional: where no C
compiler is found the install goes on and the consumer uses aiokafka's record parser
(``aiozkconsumer.kafka.native.AVAILABLE`` tells which one runs) and a Python hand-out.
"""

from setuptools import Extension, setup

FLAGS = [
    "-O3",
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

setup(
    ext_modules=[
        Extension(
            "aiozkconsumer.kafka._native",
            ["aiozkconsumer/kafka/_native.c"],
            extra_compile_args=FLAGS,
            optional=True,
        ),
        Extension(
            "aiozkconsumer._handout",
            ["aiozkconsumer/_handout.c"],
            extra_compile_args=FLAGS,
            optional=True,
        ),
    ]
)
