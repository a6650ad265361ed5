"""Write a copy of a Llama GGUF that keeps only its first N transformer layers.

For the GPU check (scripts/gpu_check.sh): the device tool carries at most 64 MiB with
the working tree and the machine cannot download, while SmolLM2-135M's GGUF is 98 MB.
Eight of its 30 layers (with the tied Q8_0 embedding, ~30 MB) make a ~48 MB model that
exercises exactly the same code (shapes, kernels, KV layout) per layer; its text is
gibberish, which graph-vs-eager equality does not care about.

    .venv/bin/python -m bench.gguf_trim --layers 8 --out .gpu/model.gguf
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import gguf

from voxrelay.pipeline.models import asset_path


def trim(source: Path, target: Path, layers: int) -> None:
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    block_count = f"{arch}.block_count"
    if layers > reader.fields[block_count].contents():
        raise ValueError(f"{source} has fewer than {layers} layers")
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(target, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        # GGUF.* are the reader's virtual fields; the writer adds the architecture itself.
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = layers if field.name == block_count else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub_type)
    kept = [
        tensor
        for tensor in reader.tensors
        if not (match := re.match(r"blk\.(\d+)\.", tensor.name)) or int(match[1]) < layers
    ]
    for tensor in kept:
        data = tensor.data
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--source", type=Path, default=asset_path("smollm2") / "model.gguf")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trim(args.source, args.out, args.layers)
    print(f"{args.out}: {args.out.stat().st_size / 2**20:.1f} MiB, {args.layers} layers")


if __name__ == "__main__":
    main()
