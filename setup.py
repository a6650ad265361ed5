"""The one C extension; everything else about the package is in pyproject.toml.

`voxrelay.llm._kernels` (llm/csrc/): the native LLM engine's CPU kernels for small forwards,
matmuls on GGUF's quantized blocks and attention over the paged KV cache
(llm/kernels.py, docs/llm.md). Optional: without a C compiler (or one without OpenMP)
the install still succeeds and the engine runs on torch ops and bfloat16 weights.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "voxrelay.llm._kernels",
            sources=[
                "llm/csrc/module.c",
                "llm/csrc/blocks.c",
                "llm/csrc/attention.c",
                "llm/csrc/norm.c",
            ],
            depends=["llm/csrc/kernels.h"],
            extra_compile_args=["-O3", "-fopenmp"],
            extra_link_args=["-fopenmp"],
            optional=True,
        )
    ]
)
