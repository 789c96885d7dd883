#!/usr/bin/env python3
"""Writes tests/fixtures/safetensors/: hand-made .safetensors files, valid and broken, with the
verdict of the reference `safetensors` library (pip install safetensors; torch for bf16) on each one: the
tensors it reads, or its error. optjit's reader must agree on every file (safetensors_test),
except where optjit is stricter on purpose; those cases say so and name optjit's message.

Run from the repository root: python3 tests/torch/make_safetensors_cases.py
"""
import json
import os
import struct

import safetensors
from safetensors.torch import load_file
from safetensors import safe_open

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "safetensors")
F1 = struct.pack("<f", 1.5)
F2 = struct.pack("<f", -2.25)


def entry(dtype, shape, begin, end):
    return '{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}' % (dtype, json.dumps(shape), begin, end)


A = entry("F32", [1], 0, 4)
B = entry("F32", [1], 4, 8)

# name -> (header bytes or str, data bytes, optjit's own rejection where it is stricter)
CASES = {
    "valid_two": ('{"a":%s,"b":%s}' % (A, B), F1 + F2, None),
    "valid_metadata": ('{"__metadata__":{"x":"1","y":""},"a":%s}' % A, F1, None),
    "valid_metadata_null": ('{"__metadata__":null,"a":%s}' % A, F1, None),
    "valid_metadata_empty": ('{"__metadata__":{},"a":%s}' % A, F1, None),
    "valid_spaces_around": (' {"a":%s}   ' % A, F1, None),
    "valid_newline_after": ('{"a":%s}\n' % A, F1, None),
    "valid_extra_field": ('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"note":[1,2]}}', F1, None),
    "valid_empty": ("{}", b"", None),
    "valid_scalar": ('{"a":%s}' % entry("F32", [], 0, 4), F1, None),
    "valid_zero_sized_first": ('{"z":%s,"a":%s}' % (entry("F32", [0], 0, 0), A), F1, None),
    "valid_zero_sized_last": ('{"a":%s,"z":%s}' % (A, entry("F32", [2, 0], 4, 4)), F1, None),
    "valid_out_of_order": ('{"b":%s,"a":%s}' % (B, A), F1 + F2, None),
    "valid_bf16_f16_f64_i64_bool": (
        '{"h":%s,"b":%s,"d":%s,"i":%s,"t":%s}' % (entry("F16", [1], 0, 2), entry("BF16", [1], 2, 4),
                                               entry("F64", [1], 4, 12), entry("I64", [1], 12, 20),
                                               entry("BOOL", [2], 20, 22)),
        struct.pack("<e", 0.5) + b"\x80\x3f" + struct.pack("<d", 3.0) + struct.pack("<q", -7) + b"\x01\x00",
        None),
    # The layout rule: the tensors tile the data section exactly.
    "gap_between": ('{"a":%s,"b":%s}' % (A, entry("F32", [1], 8, 12)), F1 * 3, None),
    "gap_before_first": ('{"a":%s}' % entry("F32", [1], 4, 8), F1 * 2, None),
    "trailing_bytes": ('{"a":%s}' % A, F1 * 2, None),
    "trailing_bytes_no_tensor": ("{}", b"xx", None),
    "overlap": ('{"a":%s,"b":%s}' % (entry("F32", [2], 0, 8), entry("F32", [1], 4, 8)), F1 * 2, None),
    "same_range_twice": ('{"a":%s,"b":%s}' % (A, A), F1, None),
    "short_data": ('{"a":%s,"b":%s}' % (A, B), F1, None),
    "size_mismatch": ('{"a":%s}' % entry("F32", [2], 0, 4), F1, None),
    # Names.
    "duplicate_name_other_data": ('{"a":%s,"a":%s}' % (A, B), F1 + F2, None),
    "duplicate_name_same_entry": ('{"a":%s,"a":%s}' % (A, A), F1, "'a' appears twice"),
    "duplicate_field": ('{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', F1, None),
    "duplicate_metadata": ('{"__metadata__":{"x":"1"},"__metadata__":{"y":"2"},"a":%s}' % A, F1, None),
    "duplicate_metadata_key": ('{"__metadata__":{"x":"1","x":"2"},"a":%s}' % A, F1,
                               "'x' appears twice in the entry of '__metadata__'"),
    # Metadata values are strings.
    "metadata_integer": ('{"__metadata__":{"x":1},"a":%s}' % A, F1, None),
    "metadata_list": ('{"__metadata__":{"x":["1"]},"a":%s}' % A, F1, None),
    "metadata_null_value": ('{"__metadata__":{"x":null},"a":%s}' % A, F1, None),
    "metadata_not_object": ('{"__metadata__":"x","a":%s}' % A, F1, None),
    # Fields.
    "shape_negative": ('{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', F1, None),
    "shape_float": ('{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', F1, None),
    "shape_nested": ('{"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}}', F1, None),
    "offsets_three": ('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}', F1, None),
    "offsets_negative": ('{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}', F1, None),
    "offsets_reversed": ('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}', F1, None),
    "missing_offsets": ('{"a":{"dtype":"F32","shape":[1]}}', F1, None),
    "dtype_lowercase": ('{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}', F1, None),
    "entry_not_object": ('{"a":[1]}', b"", None),
    # The header itself.
    "header_array": ("[]", b"", None),
    "header_empty": ("", b"", None),
    "header_trailing_nul": ('{"a":%s}\0\0' % A, F1, None),
    "header_not_utf8": (b'{"\xff":' + A.encode() + b"}", F1, None),
    "header_truncated": ('{"a":', b"", None),
}


def raw_files():
    """Files whose first 8 bytes are not a header length made by the cases above."""
    return {
        "length_too_large": struct.pack("<Q", 100_000_001) + b"{}",
        "length_past_end": struct.pack("<Q", 50) + b"{}",
        "shorter_than_length": b"\x01\x00\x00",
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    files = {}
    stricter = {}
    for name, (header, data, optjit_error) in CASES.items():
        h = header.encode() if isinstance(header, str) else header
        files[name] = struct.pack("<Q", len(h)) + h + data
        if optjit_error:
            stricter[name] = optjit_error
    files.update(raw_files())
    verdicts = {}
    for name, content in sorted(files.items()):
        path = os.path.join(OUT, name + ".safetensors")
        with open(path, "wb") as f:
            f.write(content)
        v = {}
        try:
            tensors = load_file(path)
            with safe_open(path, "pt") as f:
                meta = f.metadata() or {}
            v["reference"] = "accepts"
            v["tensors"] = {k: {"shape": list(t.shape), "values": t.double().reshape(-1).tolist()}
                            for k, t in tensors.items()}
            v["metadata"] = meta
        except Exception as e:  # the library's own error
            v["reference"] = "rejects"
            v["error"] = str(e)
        if name in stricter:
            v["optjit_rejects"] = stricter[name]
        verdicts[name] = v
    with open(os.path.join(OUT, "verdicts.json"), "w") as f:
        json.dump({"safetensors_version": safetensors.__version__, "cases": verdicts}, f, indent=1,
                  sort_keys=True)
        f.write("\n")
    print(f"{len(verdicts)} cases in {OUT}")


if __name__ == "__main__":
    main()
