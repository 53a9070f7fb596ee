"""Safetensors files of float32 tensors, as `psctl export` writes them.

The layout: an 8-byte little-endian header length n, n bytes of JSON
{"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
..., "__metadata__": {"key": "text", ...}}, then the tensors' raw
little-endian data, offsets counted from its start.

    state = load_safetensors("model.safetensors")
    model.load_state_dict(state, strict=True)

F32 tensors are read and written, and I64 ones read (a sparse table's
ids: `psctl export` writes table T as "T.ids" and "T.weight", the rows
of those ids), in a little-endian machine's byte order; no third-party
package is needed. A table's rows go into a `torch.nn.EmbeddingBag` by
index:

    with torch.no_grad():
        bag.weight[state["words.ids"]] = state["words.weight"]
"""

import ctypes
import json
import math
import struct

import torch

__all__ = ["load_safetensors", "save_safetensors"]

_DTYPES = {"F32": torch.float32, "I64": torch.int64}
_HEADER_LIMIT = 100 << 20  # a header longer than this is taken for a corrupt file


def load_safetensors(path):
    """{name: CPU tensor} of the safetensors file at path: float32 for F32,
    int64 for I64 (a sparse table's ids in a `psctl export`). ValueError
    naming the cause if it is malformed or holds another dtype."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: %d bytes, too short for a safetensors header length"
                         % (path, len(blob)))
    (n,) = struct.unpack("<Q", blob[:8])
    if n > min(_HEADER_LIMIT, len(blob) - 8):
        raise ValueError("%s: header length %d does not fit in the file's %d bytes"
                         % (path, n, len(blob)))
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError("%s: the header is not JSON: %s" % (path, e)) from None
    if not isinstance(header, dict):
        raise ValueError("%s: the header is not a JSON object" % path)
    data = memoryview(blob)[8 + n:]
    state = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        state[name] = _tensor(path, name, entry, data)
    return state


def _tensor(path, name, entry, data):
    if not isinstance(entry, dict):
        raise ValueError("%s: tensor '%s': its entry is not an object" % (path, name))
    dtype = _DTYPES.get(entry.get("dtype"))
    if dtype is None:
        raise ValueError("%s: tensor '%s' is %s; only F32 and I64 are supported"
                         % (path, name, entry.get("dtype")))
    size = 8 if dtype == torch.int64 else 4
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError("%s: tensor '%s': shape %r is not a list of sizes"
                         % (path, name, shape))
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= len(data)):
        raise ValueError("%s: tensor '%s': data_offsets %r are not within the %d data bytes"
                         % (path, name, offsets, len(data)))
    begin, end = offsets
    if end - begin != size * math.prod(shape):
        raise ValueError("%s: tensor '%s': %d bytes for shape %s (%s needs %d)"
                         % (path, name, end - begin, shape, entry["dtype"],
                            size * math.prod(shape)))
    if begin == end:
        return torch.zeros(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(shape)


def save_safetensors(state_dict, path, metadata=None):
    """Writes state_dict's tensors (float32, any device) to path as
    safetensors, with the {str: str} metadata if given. TypeError for a
    tensor of another dtype."""
    entries, chunks, offset = {}, [], 0
    for name, tensor in state_dict.items():
        if tensor.dtype != torch.float32:
            raise TypeError("tensor '%s' is %s; save_safetensors writes float32 only"
                            % (name, tensor.dtype))
        values = tensor.detach().to("cpu").contiguous()
        raw = ctypes.string_at(values.data_ptr(), 4 * values.numel()) if values.numel() else b""
        entries[name] = {"dtype": "F32", "shape": list(tensor.shape),
                         "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        entries["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    header = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    header += b" " * (-len(header) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for raw in chunks:
            f.write(raw)
