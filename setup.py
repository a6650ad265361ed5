"""The one C extension; everything else about the package is in pyproject.toml.

`llm._ggml`: the native LLM engine's matmuls on GGUF's quantized blocks
(llm/weights.py, docs/llm.md). Optional: without a C compiler (or with one that has no
OpenMP) the install still succeeds and the engine decodes on bfloat16 weights instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "llm._ggml",
            sources=["llm/_ggml.c"],
            extra_compile_args=["-O3", "-fopenmp"],
            extra_link_args=["-fopenmp"],
            optional=True,
        )
    ]
)
